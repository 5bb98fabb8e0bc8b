//! Mapping memory errors and request rejections to HTTP answers, always as
//! `{"error":{"code","message"}}`.

use crate::api::{ErrorBody, ErrorDetail};
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memgate_core::MemoryError;
use serde::de::DeserializeOwned;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", message)
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
        Self::new(status_of(&err), err.code(), err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid_input",
        };
        // 422 (valid JSON, wrong shape) and 400 (not JSON) are both bad input.
        let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
            StatusCode::BAD_REQUEST
        } else {
            status
        };
        Self::new(status, code, rejection.body_text())
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
