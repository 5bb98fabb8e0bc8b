//! Python values to memgate's JSON model and back.
//!
//! Messages arrive as LangChain message objects or plain dicts. They are read
//! the way the host's `_message_signature` reads them (a dict by key, an
//! object by attribute) and handed to `memgate_core::Message`'s tolerant
//! deserializer, so ids, roles, content strings or blocks, tool calls, tool
//! results and `additional_kwargs` flags arrive unchanged. Values that JSON
//! cannot hold become their `str()`, as `json.dumps(default=str)` does, so
//! signatures match the host's byte for byte.

use memgate_core::message::truthy;
use memgate_core::signature::{
    message_signature, signature_of, ContentRef, HeadFingerprint, SequenceHasher, SignatureFields,
};
use memgate_core::{Content, KnownHead, Message, Role, ToolCall};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::Borrowed;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Nesting deeper than this is refused (a self-referencing list would
/// otherwise never end; `json.dumps` refuses it too).
const MAX_DEPTH: usize = 64;

/// A Python value as JSON: `None`, bools, ints, floats, strings, lists,
/// tuples and dicts map to their JSON forms; anything else to `str(value)`.
/// Non-finite floats become `null` (JSON has no NaN).
pub fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    to_json_at(value, 0)
}

fn to_json_at(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "value nests deeper than {MAX_DEPTH} levels (circular reference?)"
        )));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        if let Ok(u) = value.extract::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        return Ok(Value::String(value.str()?.to_str()?.to_owned()));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(Number::from_f64(f.value()).map_or(Value::Null, Value::Number));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            map.insert(key_to_string(&k)?, to_json_at(&v, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = value.cast::<PyList>() {
        let mut items = Vec::with_capacity(l.len());
        for item in l.iter() {
            items.push(to_json_at(&item, depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        let mut items = Vec::with_capacity(t.len());
        for item in t.iter() {
            items.push(to_json_at(&item, depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    Ok(Value::String(value.str()?.to_str()?.to_owned()))
}

/// A dict key as `json.dumps` writes it: strings as they are, `True`,
/// `False` and `None` as `true`, `false`, `null`, other keys as `str()`.
fn key_to_string(key: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = key.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    if let Ok(b) = key.cast::<PyBool>() {
        return Ok(if b.is_true() { "true" } else { "false" }.to_owned());
    }
    if key.is_none() {
        return Ok("null".to_owned());
    }
    Ok(key.str()?.to_str()?.to_owned())
}

/// The fields of a message the host reads, in every spelling it accepts
/// (DeerFlow's `_message_signature`: `type` or `role`, `tool_call_id` or
/// `tool_id`, `name` or `tool_name`, `status` or `tool_status`).
#[derive(Default)]
struct Fields<'py> {
    id: Option<Bound<'py, PyAny>>,
    kind: Option<Bound<'py, PyAny>>,
    role: Option<Bound<'py, PyAny>>,
    content: Option<Bound<'py, PyAny>>,
    tool_calls: Option<Bound<'py, PyAny>>,
    tool_call_id: Option<Bound<'py, PyAny>>,
    tool_id: Option<Bound<'py, PyAny>>,
    name: Option<Bound<'py, PyAny>>,
    tool_name: Option<Bound<'py, PyAny>>,
    status: Option<Bound<'py, PyAny>>,
    tool_status: Option<Bound<'py, PyAny>>,
    additional_kwargs: Option<Bound<'py, PyAny>>,
}

/// The message fields read from a host object: the names of memgate's own
/// message wire form.
const FIELD_NAMES: &[&str] = memgate_core::message::MESSAGE_FIELDS;

/// [`FIELD_NAMES`] as interned Python strings, in the same order.
fn interned_field_names(py: Python<'_>) -> &[Py<PyString>] {
    static NAMES: pyo3::sync::PyOnceLock<Vec<Py<PyString>>> = pyo3::sync::PyOnceLock::new();
    NAMES.get_or_init(py, || {
        FIELD_NAMES
            .iter()
            .map(|name| PyString::intern(py, name).unbind())
            .collect()
    })
}

impl<'py> Fields<'py> {
    fn set(&mut self, key: &str, value: Bound<'py, PyAny>) {
        let slot = match key {
            "id" => &mut self.id,
            "type" => &mut self.kind,
            "role" => &mut self.role,
            "content" => &mut self.content,
            "tool_calls" => &mut self.tool_calls,
            "tool_call_id" => &mut self.tool_call_id,
            "tool_id" => &mut self.tool_id,
            "name" => &mut self.name,
            "tool_name" => &mut self.tool_name,
            "status" => &mut self.status,
            "tool_status" => &mut self.tool_status,
            "additional_kwargs" => &mut self.additional_kwargs,
            _ => return,
        };
        if !value.is_none() {
            *slot = Some(value);
        }
    }

    /// One pass over a mapping's items (a dict message, or a pydantic
    /// model's `__dict__`): no per-field lookups, no exceptions. Attribute
    /// names are interned, so a key is first matched by identity against
    /// the interned field names, then against the listed keys that name no
    /// field ([`OTHER_KEYS`]); only other keys are read as text, and an
    /// instance dict's (`learn`) are then listed. The walk
    /// borrows (`PyDict_Next`): a value is touched only when its key is a
    /// field read here, so the objects of fields no signature covers
    /// (response metadata, usage) are never brought into the cache.
    fn from_dict(dict: &Bound<'py, PyDict>, learn: bool) -> PyResult<Self> {
        let py = dict.py();
        let names = interned_field_names(py);
        let mut fields = Self::default();
        let mut pos: ffi::Py_ssize_t = 0;
        let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: `dict` is a live dict and the GIL is held; nothing in the
        // loop runs Python code or changes the dict, so the borrowed key and
        // value stay valid while they are used, and a value kept in `fields`
        // gets its own reference (`from_borrowed_ptr`).
        while unsafe { ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut key, &mut value) } != 0 {
            let interned = FIELD_NAMES
                .iter()
                .zip(names)
                .find_map(|(name, interned)| (interned.as_ptr() == key).then_some(*name));
            let name = match interned {
                Some(name) => Some(name),
                None if is_other_key(key) => None,
                None => {
                    let key = unsafe { Borrowed::from_ptr(py, key) };
                    match key.cast::<PyString>() {
                        Ok(text_key) => {
                            let text = text_key.to_str()?;
                            let name = FIELD_NAMES.iter().find(|name| **name == text).copied();
                            if name.is_none() && learn {
                                note_other_key(&key);
                            }
                            name
                        }
                        Err(_) => None,
                    }
                }
            };
            if let Some(name) = name {
                fields.set(name, unsafe { Bound::from_borrowed_ptr(py, value) });
            }
        }
        Ok(fields)
    }

    /// Any other object, read by attribute.
    fn from_attributes(value: &Bound<'py, PyAny>) -> PyResult<Self> {
        let mut fields = Self::default();
        for &name in FIELD_NAMES {
            if let Some(v) = value.getattr_opt(name)? {
                fields.set(name, v);
            }
        }
        Ok(fields)
    }

    /// A message's fields, from a dict, a pydantic model's `__dict__`, or
    /// any other object by attribute.
    fn read(value: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(dict) = value.cast::<PyDict>() {
            return Self::from_dict(dict, false);
        }
        if let Some(dict) = instance_dict(value) {
            return Self::from_dict(&dict, true);
        }
        match value.getattr_opt(intern!(value.py(), "__dict__"))? {
            Some(attrs) if attrs.is_instance_of::<PyDict>() => {
                note_instance_dict(value, &attrs);
                Self::from_dict(attrs.cast::<PyDict>()?, false)
            }
            _ => Self::from_attributes(value),
        }
    }

    /// The role: `type`, else `role` (non-empty).
    fn role(&self) -> PyResult<&str> {
        let kind = optional_str(&self.kind, "type")?.filter(|s| !s.is_empty());
        let role = optional_str(&self.role, "role")?.filter(|s| !s.is_empty());
        kind.or(role)
            .ok_or_else(|| PyValueError::new_err("message needs a non-empty `type` or `role`"))
    }

    /// The id: a string, or an integer as its decimal text.
    fn id(&self) -> PyResult<Option<Cow<'_, str>>> {
        match &self.id {
            None => Ok(None),
            Some(v) if v.is_instance_of::<PyString>() => {
                Ok(Some(Cow::Borrowed(v.cast::<PyString>()?.to_str()?)))
            }
            Some(v) if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() => {
                Ok(Some(Cow::Owned(v.str()?.to_str()?.to_owned())))
            }
            Some(_) => Err(PyValueError::new_err("message `id` must be a string")),
        }
    }

    /// The content: a string (read in place), or what [`to_json`] makes of
    /// anything else, which must be a string or a list of blocks.
    fn content(&self) -> PyResult<ContentRead<'_>> {
        let Some(v) = &self.content else {
            return Ok(ContentRead::Text(""));
        };
        if let Ok(s) = v.cast::<PyString>() {
            return Ok(ContentRead::Text(s.to_str()?));
        }
        match to_json(v)? {
            Value::String(s) => Ok(ContentRead::Owned(Content::Text(s))),
            Value::Array(blocks) => Ok(ContentRead::Owned(Content::Blocks(blocks))),
            _ => Err(PyValueError::new_err(
                "message `content` must be a string or a list of blocks",
            )),
        }
    }

    fn tool_calls(&self) -> PyResult<Vec<ToolCall>> {
        match &self.tool_calls {
            None => Ok(Vec::new()),
            Some(v) => tool_calls(v),
        }
    }

    fn tool_call_id(&self) -> PyResult<Option<&str>> {
        Ok(optional_str(&self.tool_call_id, "tool_call_id")?
            .or(optional_str(&self.tool_id, "tool_id")?))
    }

    fn name(&self) -> PyResult<Option<&str>> {
        Ok(optional_str(&self.name, "name")?.or(optional_str(&self.tool_name, "tool_name")?))
    }

    fn status(&self) -> PyResult<Option<&str>> {
        Ok(optional_str(&self.status, "status")?
            .or(optional_str(&self.tool_status, "tool_status")?))
    }

    /// `additional_kwargs` when it is a dict (anything else reads as empty).
    fn kwargs(&self) -> Option<&Bound<'py, PyDict>> {
        self.additional_kwargs
            .as_ref()
            .and_then(|v| v.cast::<PyDict>().ok())
    }
}

/// Types whose objects' `__dict__` attribute is their instance dict, the
/// one `PyObject_GenericGetDict` returns (seen to be the same object on one
/// object of the type): LangChain's message classes. Reading it directly
/// skips the attribute lookup through the type's bases on every message.
/// A type listed here is kept alive for good (its reference is never
/// released), so its address never names another type.
static INSTANCE_DICT_TYPES: [AtomicPtr<ffi::PyTypeObject>; 16] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; 16];

/// The instance dict of an object of a listed type.
fn instance_dict<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyDict>> {
    // SAFETY: `value` is a live object and the GIL is held.
    let kind = unsafe { ffi::Py_TYPE(value.as_ptr()) };
    if !INSTANCE_DICT_TYPES
        .iter()
        .any(|listed| listed.load(Ordering::Acquire) == kind)
    {
        return None;
    }
    generic_dict(value)?.cast_into::<PyDict>().ok()
}

/// `PyObject_GenericGetDict(value)`, or `None` (its error dropped) when the
/// object has none.
fn generic_dict<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    let py = value.py();
    // SAFETY: `value` is live and the GIL is held; a non-null result is a
    // new reference, which `from_owned_ptr` takes over.
    let dict = unsafe { ffi::PyObject_GenericGetDict(value.as_ptr(), std::ptr::null_mut()) };
    if dict.is_null() {
        drop(PyErr::take(py));
        return None;
    }
    Some(unsafe { Bound::from_owned_ptr(py, dict) })
}

/// Lists `value`'s type when the `__dict__` its attribute lookup gave is
/// the instance dict itself.
fn note_instance_dict(value: &Bound<'_, PyAny>, attrs: &Bound<'_, PyAny>) {
    if !generic_dict(value).is_some_and(|dict| dict.is(attrs)) {
        return;
    }
    // SAFETY: as in `instance_dict`.
    let kind = unsafe { ffi::Py_TYPE(value.as_ptr()) };
    list_for_good(&INSTANCE_DICT_TYPES, kind);
}

/// Puts the live object `object` in the first free slot of `list` (unless
/// it is there already) and keeps it alive for good; a full list is left
/// as it is.
fn list_for_good<T>(list: &[AtomicPtr<T>], object: *mut T) {
    for listed in list {
        match listed.compare_exchange(
            std::ptr::null_mut(),
            object,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: the caller's object is live and the GIL is held; the
            // reference taken here is never released.
            Ok(_) => return unsafe { ffi::Py_IncRef(object.cast()) },
            Err(other) if other == object => return,
            Err(_) => {}
        }
    }
}

/// Keys of listed types' instance dicts that name no field
/// (`response_metadata`, `usage_metadata`, `example`, ...), by address:
/// pydantic fills every instance's dict with the same key objects, so after
/// the first message they are passed over without being read as text (they
/// were most of a head's reading). A listed key is kept alive for good, so
/// its address can never name another string; plain dict messages, whose
/// keys may be new objects every time, list nothing.
static OTHER_KEYS: [AtomicPtr<ffi::PyObject>; 16] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; 16];

fn is_other_key(key: *mut ffi::PyObject) -> bool {
    OTHER_KEYS
        .iter()
        .any(|listed| listed.load(Ordering::Acquire) == key)
}

/// Lists `key`, a key of an instance dict that names no field.
fn note_other_key(key: &Borrowed<'_, '_, PyAny>) {
    list_for_good(&OTHER_KEYS, key.as_ptr());
}

/// Content as read: a string in place, or converted.
enum ContentRead<'a> {
    Text(&'a str),
    Owned(Content),
}

impl ContentRead<'_> {
    fn as_ref(&self) -> ContentRef<'_> {
        match self {
            ContentRead::Text(s) => ContentRef::Text(s),
            ContentRead::Owned(Content::Text(s)) => ContentRef::Text(s),
            ContentRead::Owned(Content::Blocks(blocks)) => ContentRef::Blocks(blocks),
        }
    }

    fn into_owned(self) -> Content {
        match self {
            ContentRead::Text(s) => Content::Text(s.to_owned()),
            ContentRead::Owned(content) => content,
        }
    }
}

fn optional_str<'a>(value: &'a Option<Bound<'_, PyAny>>, field: &str) -> PyResult<Option<&'a str>> {
    match value {
        None => Ok(None),
        Some(v) => match v.cast::<PyString>() {
            Ok(s) => Ok(Some(s.to_str()?)),
            Err(_) => Err(PyValueError::new_err(format!(
                "message `{field}` must be a string"
            ))),
        },
    }
}

/// One message, from a dict or a LangChain message object, with the rules
/// of `memgate_core::Message`'s tolerant deserializer: the role is `type`,
/// else `role` (non-empty); `None` anywhere reads as absent; a non-dict
/// `additional_kwargs` reads as empty.
pub fn message(value: &Bound<'_, PyAny>) -> PyResult<Message> {
    let fields = Fields::read(value)?;
    let role = fields.role()?;
    let id = fields.id()?.map(Cow::into_owned);
    let content = fields.content()?.into_owned();
    let tool_calls = fields.tool_calls()?;
    let additional_kwargs = match fields.kwargs() {
        Some(kwargs) => match to_json(kwargs)? {
            Value::Object(map) => map,
            _ => Map::new(),
        },
        None => Map::new(),
    };
    Ok(Message {
        id,
        role: Role::spelled(role),
        content,
        tool_calls,
        tool_call_id: fields.tool_call_id()?.map(str::to_owned),
        name: fields.name()?.map(str::to_owned),
        status: fields.status()?.map(str::to_owned),
        additional_kwargs,
    })
}

/// A message's signature, read in place from the host's object: no
/// `Message` is built, and the strings are not copied. Every field the
/// signature covers is read with [`message`]'s rules and errors; of
/// `additional_kwargs` only `hide_from_ui` and `tool_calls` are read.
pub fn signature(value: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(sign_in_place(value, true)?.unwrap_or_default())
}

/// The signature read in place; `None` only for a hidden message when
/// `sign_hidden` is false.
fn sign_in_place(value: &Bound<'_, PyAny>, sign_hidden: bool) -> PyResult<Option<String>> {
    in_place(value, sign_hidden, signature_of)
}

/// Hands `use_fields` what a signature covers, read in place from the
/// host's object (no `Message` built, strings not copied); `None` without
/// calling it for a hidden message when `sign_hidden` is false. The one
/// reader behind signing and fingerprinting a head.
fn in_place<R>(
    value: &Bound<'_, PyAny>,
    sign_hidden: bool,
    use_fields: impl FnOnce(&SignatureFields<'_>) -> R,
) -> PyResult<Option<R>> {
    let fields = Fields::read(value)?;
    let role = fields.role()?;
    let id = fields.id()?;
    let content = fields.content()?;
    let tool_calls = fields.tool_calls()?;
    let py = value.py();
    let kwargs = fields.kwargs();
    let flag = |key: &Bound<'_, PyString>| -> PyResult<Option<Value>> {
        match kwargs {
            Some(kwargs) => kwargs.get_item(key)?.map(|v| to_json(&v)).transpose(),
            None => Ok(None),
        }
    };
    if !sign_hidden && flag(intern!(py, "hide_from_ui"))?.is_some_and(|v| truthy(&v)) {
        return Ok(None);
    }
    let legacy = if tool_calls.is_empty() {
        flag(intern!(py, "tool_calls"))?
    } else {
        None
    };
    Ok(Some(use_fields(&SignatureFields {
        id: id.as_deref(),
        role,
        content: content.as_ref(),
        tool_calls: &tool_calls,
        legacy_tool_calls: legacy.as_ref(),
        tool_call_id: fields.tool_call_id()?,
        tool_name: fields.name()?,
        tool_status: fields.status()?,
    })))
}

/// LangChain tool calls (`{name, args, id, type}` dicts) read directly;
/// any other shape goes through `ToolCall`'s deserializer for its rules.
fn tool_calls(value: &Bound<'_, PyAny>) -> PyResult<Vec<ToolCall>> {
    let invalid =
        |e: serde_json::Error| PyValueError::new_err(format!("message `tool_calls`: {e}"));
    let Ok(list) = value.cast::<PyList>() else {
        return serde_json::from_value(to_json(value)?).map_err(invalid);
    };
    let py = value.py();
    // Interned keys: a lookup is then a pointer comparison, and no key
    // string is built per call.
    let (name_key, id_key, type_key, args_key) = (
        intern!(py, "name"),
        intern!(py, "id"),
        intern!(py, "type"),
        intern!(py, "args"),
    );
    let mut calls = Vec::with_capacity(list.len());
    for item in list.iter() {
        let direct = item.cast::<PyDict>().ok().and_then(|d| {
            let name = d.get_item(name_key).ok()??.cast_into::<PyString>().ok()?;
            let id = match d.get_item(id_key).ok()? {
                None => None,
                Some(v) if v.is_none() => None,
                Some(v) => Some(v.cast_into::<PyString>().ok()?),
            };
            let kind = match d.get_item(type_key).ok()? {
                None => None,
                Some(v) => Some(v.cast_into::<PyString>().ok()?),
            };
            Some((name, d.get_item(args_key).ok()?, id, kind))
        });
        let call = match direct {
            Some((name, args, id, kind)) => {
                let mut call = ToolCall::new(
                    name.to_str()?,
                    match args {
                        Some(a) if !a.is_none() => to_json(&a)?,
                        _ => Value::Object(Map::new()),
                    },
                    id.map(|i| i.to_str().map(str::to_owned)).transpose()?,
                );
                if let Some(kind) = kind {
                    call.call_type = kind.to_str()?.to_owned();
                }
                call
            }
            None => serde_json::from_value(to_json(&item)?).map_err(invalid)?,
        };
        calls.push(call);
    }
    Ok(calls)
}

/// A transcript: any iterable of messages. Errors name the message index.
pub fn messages(values: &Bound<'_, PyAny>) -> PyResult<Vec<Message>> {
    let mut out = Vec::with_capacity(values.len().unwrap_or(0));
    for_each_message(values, |m| out.push(m))?;
    Ok(out)
}

/// Hands each message of a transcript to `each` as soon as it is read (a
/// streamed capture stores it while the rest is still being converted).
/// Errors name the message index.
pub fn for_each_message(values: &Bound<'_, PyAny>, mut each: impl FnMut(Message)) -> PyResult<()> {
    for (i, item) in values.try_iter()?.enumerate() {
        let item = item?;
        each(message(&item).map_err(|e| {
            PyValueError::new_err(format!("messages[{i}]: {}", e.value(values.py())))
        })?);
    }
    Ok(())
}

/// Reads a transcript (a list or tuple) against a cursor's prefix of
/// `count` captured messages with sequence digest `digest`: the first
/// `count` captured messages are signed in place into a [`KnownHead`]
/// (hidden ones are read whole and go through `keeps`, the capture
/// filter), every message after them is converted. `None` when the
/// transcript does not start with that prefix (it is shorter, or its
/// digest differs: compaction, an edit); the caller then reads it whole.
/// Errors name the message index.
pub fn read_against_prefix(
    values: &Bound<'_, PyAny>,
    count: usize,
    digest: &str,
    keeps: impl Fn(&Message) -> bool,
) -> PyResult<Option<(KnownHead, Vec<Message>)>> {
    let signing = Signing {
        head: KnownHead::with_capacity(count),
        digest,
    };
    Ok(read_head(values, count, signing, keeps)?.map(|(signed, rest)| (signed.head, rest)))
}

/// Reads a transcript (a list or tuple) against a cursor's prefix head: the
/// first `running.absorbed()` captured messages are fingerprinted in place
/// (hidden ones read whole and filtered by `keeps`, as when signing) and,
/// when their [`HeadFingerprint`] is `fingerprint`, handed over as a
/// recognised [`KnownHead`] without a single signature; every message after
/// them is converted. `None` when the head is not recognised (shorter, or
/// a different fingerprint); the caller then signs it
/// ([`read_against_prefix`]). Errors name the message index.
pub fn read_recognised(
    values: &Bound<'_, PyAny>,
    fingerprint: &str,
    running: SequenceHasher,
    keeps: impl Fn(&Message) -> bool,
) -> PyResult<Option<(KnownHead, Vec<Message>)>> {
    let recognising = Recognising {
        fingerprint: HeadFingerprint::default(),
        expected: fingerprint,
        captured: 0,
        filtered: 0,
    };
    Ok(
        read_head(values, running.absorbed(), recognising, keeps)?.map(|(read, rest)| {
            let head = KnownHead::recognised(running, read.fingerprint, read.filtered);
            (head, rest)
        }),
    )
}

/// What reading a transcript's head builds, one captured message at a time.
trait HeadReader {
    /// A visible message, read in place.
    fn visible(&mut self, fields: &SignatureFields<'_>);
    /// A hidden message the capture filter keeps.
    fn kept(&mut self, message: &Message);
    /// A hidden message the capture filter leaves out.
    fn skip(&mut self);
    /// Captured messages so far.
    fn len(&self) -> usize;
    /// Once the head is complete: is it the cursor's?
    fn matches(&self) -> bool;
}

/// Signs the head ([`read_against_prefix`]).
struct Signing<'a> {
    head: KnownHead,
    digest: &'a str,
}

impl HeadReader for Signing<'_> {
    fn visible(&mut self, fields: &SignatureFields<'_>) {
        self.head.push(signature_of(fields), fields);
    }
    fn kept(&mut self, message: &Message) {
        self.head
            .push(message_signature(message), &message.signature_fields());
    }
    fn skip(&mut self) {
        self.head.skip();
    }
    fn len(&self) -> usize {
        self.head.len()
    }
    fn matches(&self) -> bool {
        self.head.digest() == self.digest
    }
}

/// Fingerprints the head ([`read_recognised`]).
struct Recognising<'a> {
    fingerprint: HeadFingerprint,
    expected: &'a str,
    captured: usize,
    filtered: usize,
}

impl HeadReader for Recognising<'_> {
    fn visible(&mut self, fields: &SignatureFields<'_>) {
        self.fingerprint.absorb(fields);
        self.captured += 1;
    }
    fn kept(&mut self, message: &Message) {
        self.visible(&message.signature_fields());
    }
    fn skip(&mut self) {
        self.filtered += 1;
    }
    fn len(&self) -> usize {
        self.captured
    }
    fn matches(&self) -> bool {
        self.fingerprint.value() == self.expected
    }
}

/// The one walk behind both head reads: the first `count` captured
/// messages go to `reader` (hidden ones read whole and filtered by
/// `keeps`), every message after them is converted; `None` when the
/// transcript is shorter or the complete head does not match.
fn read_head<R: HeadReader>(
    values: &Bound<'_, PyAny>,
    count: usize,
    mut reader: R,
    keeps: impl Fn(&Message) -> bool,
) -> PyResult<Option<(R, Vec<Message>)>> {
    let len = values.len()?;
    if len < count {
        return Ok(None);
    }
    let mut rest = Vec::new();
    for (i, item) in values.try_iter()?.enumerate() {
        let item = item?;
        let at =
            |e: PyErr| PyValueError::new_err(format!("messages[{i}]: {}", e.value(values.py())));
        if reader.len() == count {
            rest.push(message(&item).map_err(at)?);
            continue;
        }
        let read = in_place(&item, false, |fields| reader.visible(fields));
        if read.map_err(at)?.is_none() {
            let hidden = message(&item).map_err(at)?;
            if keeps(&hidden) {
                reader.kept(&hidden);
            } else {
                reader.skip();
            }
        }
        if reader.len() == count {
            if !reader.matches() {
                return Ok(None);
            }
            rest.reserve(len - i - 1);
        }
    }
    Ok((reader.len() == count).then_some((reader, rest)))
}

/// A JSON value as a Python object (dicts, lists, str, int, float, bool, None).
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// Any serializable result as a Python object.
pub fn serialize_to_py<'py, T: serde::Serialize>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_value(value)
        .map_err(|e| PyValueError::new_err(format!("cannot represent the result: {e}")))?;
    to_py(py, &json)
}
