//! Asks a local OpenAI-compatible server for the context window it runs a
//! model with (feature `http`), for models the registry and the config do
//! not know: llama.cpp's `GET /props` (`n_ctx`), then Ollama's `GET /api/ps`
//! (`context_length` of the loaded model) and `POST /api/show` (`num_ctx`
//! in the model's parameters).
//!
//! Only the window the server actually allocates counts: a model's trained
//! length (Ollama's `model_info.*.context_length`) is not what a request
//! may fill, so it is never used.

use std::time::Duration;

use serde_json::Value;

/// A window the server reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerWindow {
    /// The context window in tokens.
    pub tokens: u64,
    /// Where it came from, e.g. `n_ctx from http://127.0.0.1:8080/props`.
    pub source: String,
}

/// Why no window could be read; each attempt says what it got.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the server did not report a context window ({})", .attempts.join("; "))]
pub struct ProbeError {
    /// One line per endpoint tried.
    pub attempts: Vec<String>,
}

/// The most a reply may hold before it is refused (a `/props` body is a few
/// KiB; a chat template can make it tens).
const MAX_BODY: usize = 1 << 20;
/// A window above this is not a window (a misread field).
const MAX_WINDOW: u64 = 100_000_000;
/// Each request's whole deadline.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Reads a window and the name of its field from a reply.
type ReadWindow = fn(&Value, &str) -> Option<(u64, &'static str)>;

/// Returns the server root for an OpenAI-compatible base URL:
/// `http://host:8080/v1/` → `http://host:8080`.
pub fn server_root(base_url: &str) -> &str {
    let trimmed = base_url.trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed)
}

/// Asks the server behind `base_url` for the window it serves `model`
/// with. `api_key`, when given, is sent as a bearer token.
pub async fn server_context_window(
    base_url: &str,
    model: &str,
    api_key: Option<&str>,
) -> Result<ServerWindow, ProbeError> {
    let root = server_root(base_url);
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|err| ProbeError {
            attempts: vec![format!("cannot build the HTTP client: {err}")],
        })?;
    let mut attempts = Vec::new();
    let tries: [(&str, Option<Value>, ReadWindow); 3] = [
        ("props", None, llama_cpp_props),
        ("api/ps", None, ollama_ps),
        (
            "api/show",
            Some(serde_json::json!({ "model": model })),
            ollama_show,
        ),
    ];
    for (path, body, read) in tries {
        let url = format!("{root}/{path}");
        let mut request = match &body {
            Some(body) => client.post(&url).json(body),
            None => client.get(&url),
        };
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        }
        match fetch(request).await {
            Ok(json) => match read(&json, model) {
                Some((tokens, field)) if (1..=MAX_WINDOW).contains(&tokens) => {
                    return Ok(ServerWindow {
                        tokens,
                        source: format!("{field} from {url}"),
                    });
                }
                Some((tokens, field)) => {
                    attempts.push(format!("{url}: {field} {tokens} is not a window"))
                }
                None => attempts.push(format!("{url}: no window for {model}")),
            },
            Err(why) => attempts.push(format!("{url}: {why}")),
        }
    }
    Err(ProbeError { attempts })
}

async fn fetch(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let mut response = request.send().await.map_err(|err| {
        if err.is_timeout() {
            "no answer within 3 s".to_owned()
        } else if err.is_connect() {
            "connection refused or unreachable".to_owned()
        } else {
            "request failed".to_owned()
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| "the reply broke off".to_owned())?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_BODY {
            return Err("the reply is over 1 MiB".to_owned());
        }
    }
    serde_json::from_slice(&body).map_err(|_| "the reply is not JSON".to_owned())
}

/// llama.cpp: `default_generation_settings.n_ctx` (per slot), else the
/// top-level `n_ctx`.
fn llama_cpp_props(json: &Value, _model: &str) -> Option<(u64, &'static str)> {
    json.pointer("/default_generation_settings/n_ctx")
        .and_then(Value::as_u64)
        .map(|n| (n, "n_ctx"))
        .or_else(|| {
            json.get("n_ctx")
                .and_then(Value::as_u64)
                .map(|n| (n, "n_ctx"))
        })
}

/// Whether an Ollama name means `model` (`qwen3` is `qwen3:latest`).
fn same_ollama_model(name: &str, model: &str) -> bool {
    let tagged = |n: &str| {
        if n.contains(':') {
            n.to_owned()
        } else {
            format!("{n}:latest")
        }
    };
    tagged(name) == tagged(model)
}

/// Ollama: the loaded model's `context_length` in `/api/ps`.
fn ollama_ps(json: &Value, model: &str) -> Option<(u64, &'static str)> {
    json.get("models")?
        .as_array()?
        .iter()
        .find(|loaded| {
            ["name", "model"].iter().any(|key| {
                loaded
                    .get(key)
                    .and_then(Value::as_str)
                    .is_some_and(|name| same_ollama_model(name, model))
            })
        })?
        .get("context_length")?
        .as_u64()
        .map(|n| (n, "context_length of the loaded model"))
}

/// Ollama: `num_ctx` in the model's `parameters` (one `key value` per line).
fn ollama_show(json: &Value, _model: &str) -> Option<(u64, &'static str)> {
    json.get("parameters")?.as_str()?.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("num_ctx"))
            .then(|| words.next()?.parse().ok())
            .flatten()
            .map(|n| (n, "num_ctx"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_root_drops_v1_and_slashes() {
        assert_eq!(server_root("http://h:8080/v1/"), "http://h:8080");
        assert_eq!(server_root("http://h:8080"), "http://h:8080");
        assert_eq!(server_root("http://h/openai/v1"), "http://h/openai");
    }

    #[test]
    fn each_server_shape_is_read() {
        let props = json!({"default_generation_settings": {"n_ctx": 8192}, "n_ctx": 16384});
        assert_eq!(llama_cpp_props(&props, "x"), Some((8192, "n_ctx")));
        assert_eq!(
            llama_cpp_props(&json!({"n_ctx": 4096}), "x"),
            Some((4096, "n_ctx"))
        );
        assert_eq!(llama_cpp_props(&json!({"n_ctx": "big"}), "x"), None);
        let ps = json!({"models": [
            {"name": "llama3:latest", "context_length": 2048},
            {"name": "qwen3:latest", "model": "qwen3:latest", "context_length": 32768},
        ]});
        assert_eq!(
            ollama_ps(&ps, "qwen3"),
            Some((32768, "context_length of the loaded model"))
        );
        assert_eq!(ollama_ps(&ps, "qwen3:8b"), None);
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx                        12288\n",
                          "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_show(&show, "q"), Some((12288, "num_ctx")));
        assert_eq!(
            ollama_show(&json!({"model_info": {"qwen2.context_length": 32768}}), "q"),
            None,
            "the trained length is not the served window"
        );
    }
}
