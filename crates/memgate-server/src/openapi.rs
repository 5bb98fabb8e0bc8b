//! The OpenAPI 3.1 document of the HTTP API, generated from the route table
//! below and the JSON Schemas of the request and response types (schemars;
//! JSON Schema 2020-12, which OpenAPI 3.1 uses as-is).

use crate::api::*;
use memgate_core::{
    CaptureReport, CaptureRequest, CommitOutcome, Continuation, Fact, ForgetReport, Handoff,
    ImportReport, MemoryExport, Recall, RecallRequest, RememberOutcome,
};
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{json, Map, Value};

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One documented operation.
pub struct Operation {
    pub method: &'static str,
    pub path: &'static str,
    pub id: &'static str,
    pub summary: &'static str,
    pub request: Option<SchemaFn>,
    /// `None` for plain-text answers (`/metrics`).
    pub response: Option<SchemaFn>,
}

/// Every route the server answers, in the order they are documented.
pub const OPERATIONS: &[Operation] = &[
    Operation {
        method: "post",
        path: "/v1/recall",
        id: "recall",
        summary: "A bounded, cited block of the caller's memory, ready to inject (empty when there is nothing).",
        request: Some(schema_of::<RecallRequest>),
        response: Some(schema_of::<Recall>),
    },
    Operation {
        method: "post",
        path: "/v1/capture",
        id: "capture",
        summary: "Capture a transcript snapshot or a compaction head; idempotent.",
        request: Some(schema_of::<CaptureRequest>),
        response: Some(schema_of::<CaptureReport>),
    },
    Operation {
        method: "post",
        path: "/v1/remember",
        id: "remember",
        summary: "Store one explicit memory and report the exact outcome (stored, already present, unknown, failed).",
        request: Some(schema_of::<RememberBody>),
        response: Some(schema_of::<RememberOutcome>),
    },
    Operation {
        method: "post",
        path: "/v1/search",
        id: "search",
        summary: "Search the caller's memory; a kind filter applies before the top_k cut.",
        request: Some(schema_of::<SearchBody>),
        response: Some(schema_of::<SearchResults>),
    },
    Operation {
        method: "post",
        path: "/v1/facts/list",
        id: "listFacts",
        summary: "List explicit memories (active, or all with include_retired).",
        request: Some(schema_of::<ListFactsBody>),
        response: Some(schema_of::<FactList>),
    },
    Operation {
        method: "post",
        path: "/v1/facts/get",
        id: "getFact",
        summary: "One explicit memory by id.",
        request: Some(schema_of::<FactIdBody>),
        response: Some(schema_of::<Fact>),
    },
    Operation {
        method: "post",
        path: "/v1/facts/revise",
        id: "reviseFact",
        summary: "Revise an explicit memory; the previous version is kept in its history.",
        request: Some(schema_of::<ReviseBody>),
        response: Some(schema_of::<Fact>),
    },
    Operation {
        method: "post",
        path: "/v1/facts/retire",
        id: "retireFact",
        summary: "Retire an explicit memory: no longer recalled, not erased.",
        request: Some(schema_of::<FactIdBody>),
        response: Some(schema_of::<Fact>),
    },
    Operation {
        method: "post",
        path: "/v1/export",
        id: "export",
        summary: "Export the caller's memory (format memgate.export.v1).",
        request: Some(schema_of::<ExportBody>),
        response: Some(schema_of::<MemoryExport>),
    },
    Operation {
        method: "post",
        path: "/v1/import",
        id: "import",
        summary: "Merge an export into the caller's memory; never duplicates.",
        request: Some(schema_of::<ImportBody>),
        response: Some(schema_of::<ImportReport>),
    },
    Operation {
        method: "post",
        path: "/v1/forget/fact",
        id: "forgetFact",
        summary: "Erase an explicit memory with its whole history (501 on remote backends).",
        request: Some(schema_of::<FactIdBody>),
        response: Some(schema_of::<ForgetReport>),
    },
    Operation {
        method: "post",
        path: "/v1/forget/thread",
        id: "forgetThread",
        summary: "Erase every captured turn of the caller's thread (501 on remote backends).",
        request: Some(schema_of::<ForgetBody>),
        response: Some(schema_of::<ForgetReport>),
    },
    Operation {
        method: "post",
        path: "/v1/forget/scope",
        id: "forgetScope",
        summary: "Erase everything of the caller's user and agent (501 on remote backends).",
        request: Some(schema_of::<ForgetBody>),
        response: Some(schema_of::<ForgetReport>),
    },
    Operation {
        method: "post",
        path: "/v1/forget/user",
        id: "forgetUser",
        summary: "Erase everything of the caller's user under every agent (501 on remote backends).",
        request: Some(schema_of::<ForgetBody>),
        response: Some(schema_of::<ForgetReport>),
    },
    Operation {
        method: "post",
        path: "/v1/handoff/prepare",
        id: "handoffPrepare",
        summary: "Prepare a handoff draft of the caller's running task (held temporarily; never memory by itself).",
        request: Some(schema_of::<HandoffPrepareBody>),
        response: Some(schema_of::<Handoff>),
    },
    Operation {
        method: "post",
        path: "/v1/handoff/get",
        id: "handoffGet",
        summary: "Inspect one of the caller's handoffs (404 once expired or for another user).",
        request: Some(schema_of::<HandoffIdBody>),
        response: Some(schema_of::<Handoff>),
    },
    Operation {
        method: "post",
        path: "/v1/handoff/correct",
        id: "handoffCorrect",
        summary: "Correct a draft's content (409 once finalized).",
        request: Some(schema_of::<HandoffCorrectBody>),
        response: Some(schema_of::<Handoff>),
    },
    Operation {
        method: "post",
        path: "/v1/handoff/finalize",
        id: "handoffFinalize",
        summary: "Finalize a draft into the prepared handoff a receiver continues from.",
        request: Some(schema_of::<HandoffIdBody>),
        response: Some(schema_of::<Handoff>),
    },
    Operation {
        method: "post",
        path: "/v1/handoff/continue",
        id: "handoffContinue",
        summary: "What a receiving task continues from: the prepared handoff and its first-turn block, untrusted history.",
        request: Some(schema_of::<HandoffIdBody>),
        response: Some(schema_of::<Continuation>),
    },
    Operation {
        method: "post",
        path: "/v1/handoff/acknowledge",
        id: "handoffAcknowledge",
        summary: "The receiver's answer: accepted, needs_clarification or declined (the last two with a message).",
        request: Some(schema_of::<HandoffAcknowledgeBody>),
        response: Some(schema_of::<Handoff>),
    },
    Operation {
        method: "post",
        path: "/v1/handoff/commit",
        id: "handoffCommit",
        summary: "Commit the handoff as one durable milestone memory, only on this explicit request; unknown outcomes are never retried.",
        request: Some(schema_of::<HandoffIdBody>),
        response: Some(schema_of::<CommitOutcome>),
    },
    Operation {
        method: "get",
        path: "/health",
        id: "health",
        summary: "Liveness, backend name and capabilities (no authentication).",
        request: None,
        response: Some(schema_of::<Health>),
    },
    Operation {
        method: "get",
        path: "/metrics",
        id: "metrics",
        summary: "Prometheus metrics: request counts and latency histograms per operation.",
        request: None,
        response: None,
    },
];

/// Error answers every operation may give, with the status they use.
const ERRORS: &[(&str, &str)] = &[
    (
        "400",
        "Bad input: the message names the field and the rule.",
    ),
    ("401", "Missing or wrong bearer token."),
    ("403", "The caller's identity is refused by the backend."),
    ("404", "No such entry in the caller's scope."),
    ("413", "Request body over the configured limit."),
    (
        "415",
        "The request body is not JSON (content-type must be application/json).",
    ),
    ("501", "The backend does not support this operation."),
    (
        "503",
        "The service is shutting down and accepts no new work.",
    ),
    ("502", "The backend failed."),
    ("504", "The backend did not answer within its deadline."),
];

/// The OpenAPI document.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "#/components/schemas".into())
        .into_generator();
    let error_schema = generator.subschema_for::<ErrorBody>();
    let mut paths = Map::new();
    for op in OPERATIONS {
        let mut operation = json!({
            "operationId": op.id,
            "summary": op.summary,
        });
        if let Some(request) = op.request {
            operation["requestBody"] = json!({
                "required": true,
                "content": {"application/json": {"schema": request(&mut generator)}}
            });
        }
        let ok = match op.response {
            Some(response) => json!({
                "description": "OK",
                "content": {"application/json": {"schema": response(&mut generator)}}
            }),
            None => json!({
                "description": "OK",
                "content": {"text/plain": {"schema": {"type": "string"}}}
            }),
        };
        let mut responses = Map::new();
        responses.insert("200".into(), ok);
        if op.request.is_some() {
            for (status, description) in ERRORS {
                responses.insert(
                    (*status).into(),
                    json!({
                        "description": description,
                        "content": {"application/json": {"schema": error_schema}}
                    }),
                );
            }
        }
        operation["responses"] = Value::Object(responses);
        let entry = paths
            .entry(op.path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        entry[op.method] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "memgate",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Long-term memory for AI agent hosts. Every operation carries the caller (user, agent, thread) in its JSON body; the user id is the host's resolved identity and is never taken from model output.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}
        },
        "components": {
            "schemas": generator.take_definitions(true),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{"bearer": []}, {}],
        "paths": paths,
    })
}
