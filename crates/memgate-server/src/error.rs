//! Mapping memory errors and request rejections to HTTP answers, always as
//! `{"error":{"code","message",…}}` with the memory error's own fields.

use crate::api::ErrorBody;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memgate_core::{MemoryError, WireError};
use serde::de::DeserializeOwned;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: WireError,
}

impl ApiError {
    /// An error of the HTTP layer itself (auth, body limits, media type).
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            error: WireError::new(code, message),
        }
    }

    /// Bad input, naming the field and the rule.
    pub fn invalid(field: &str, rule: impl Into<String>) -> Self {
        MemoryError::invalid(field, rule).into()
    }
}

/// The HTTP status of each memory error.
pub fn status_of(err: &MemoryError) -> StatusCode {
    match err {
        MemoryError::InvalidInput { .. } | MemoryError::Config(_) => StatusCode::BAD_REQUEST,
        MemoryError::RejectedIdentity(_) => StatusCode::FORBIDDEN,
        MemoryError::NotFound(_) => StatusCode::NOT_FOUND,
        MemoryError::Conflict(_) => StatusCode::CONFLICT,
        MemoryError::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
        MemoryError::DeadlineExceeded(_) => StatusCode::GATEWAY_TIMEOUT,
        MemoryError::Closed(_) => StatusCode::SERVICE_UNAVAILABLE,
        MemoryError::Corruption(_) => StatusCode::INTERNAL_SERVER_ERROR,
        MemoryError::Backend(_) => StatusCode::BAD_GATEWAY,
    }
}

impl From<MemoryError> for ApiError {
    fn from(err: MemoryError) -> Self {
        Self {
            status: status_of(&err),
            error: err.to_wire(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.error })).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => {
                Self::new(status, "body_too_large", rejection.body_text())
            }
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::new(
                status,
                "unsupported_media_type",
                "the request body must be JSON (content-type: application/json)",
            ),
            // 422 (valid JSON, wrong shape) and 400 (not JSON) are both bad
            // input; serde's text names the path of the offending field.
            _ => MemoryError::invalid("body", rejection.body_text()).into(),
        }
    }
}

/// A JSON body whose rejections answer in the API's error shape.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(rejection.into()),
        }
    }
}

/// A capture body. Strict where the shared [`Message`] type is lenient:
/// in-process hosts hand memgate their framework's message objects, but on
/// this API an unknown message field is refused, naming it
/// (`messages[2].contnet`), instead of being dropped.
///
/// [`Message`]: memgate_core::Message
pub struct CaptureBody(pub memgate_core::CaptureRequest);

impl<S> FromRequest<S> for CaptureBody
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let JsonBody(body) = JsonBody::<serde_json::Value>::from_request(req, state).await?;
        if let Some(messages) = body.get("messages").and_then(serde_json::Value::as_array) {
            memgate_core::message::refuse_unknown_message_fields(messages)?;
        }
        serde_path_to_error::deserialize(body)
            .map(CaptureBody)
            .map_err(|e| {
                MemoryError::invalid(
                    "body",
                    format!(
                        "Failed to deserialize the JSON body into the target type: {}: {}",
                        e.path(),
                        e.inner()
                    ),
                )
                .into()
            })
    }
}
