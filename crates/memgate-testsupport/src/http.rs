//! JSON posts to a served memgate's HTTP API, as a host makes them: the
//! API tests read the status, the browser tests put memory in.

use serde_json::Value;

/// `POST`s `body` to `path` of the server at `base`: the status, and the
/// answer's JSON (`null` when it has none).
pub async fn post_json(base: &str, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A call that must succeed, as when memory is put in before a test
/// looks at it: the answer's JSON.
pub async fn api(base: &str, path: &str, body: Value) -> Value {
    let (status, answer) = post_json(base, path, body).await;
    assert!((200..300).contains(&status), "{path}: {status} {answer}");
    answer
}
