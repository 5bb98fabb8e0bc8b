//! The server-sent event stream a streaming completion arrives in, cut into
//! its `data` payloads whatever the network's chunk boundaries.

/// Splits a server-sent event stream into `data` payloads.
#[derive(Default)]
pub(super) struct SseDecoder {
    buffer: Vec<u8>,
}

impl SseDecoder {
    /// Adds bytes; returns the data of every event they completed.
    pub(super) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(data) = line.strip_prefix("data:") {
                events.push(data.strip_prefix(' ').unwrap_or(data).to_owned());
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_survive_arbitrary_chunk_boundaries() {
        let stream = "data: {\"a\":1}\r\n\r\n: comment\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut decoder = SseDecoder::default();
            let (a, b) = stream.as_bytes().split_at(split);
            let mut events = decoder.push(a);
            events.extend(decoder.push(b));
            assert_eq!(events, ["{\"a\":1}", "[DONE]"], "split at {split}");
        }
    }
}
