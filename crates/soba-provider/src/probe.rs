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

/// Reads a window field from a reply: `None` when the field is absent,
/// `Some((None, name))` when it is there but not a whole number.
type ReadWindow = fn(&Value, &str) -> Option<(Option<u64>, &'static str)>;

/// Whether a base URL names this machine (`localhost` or a loopback
/// address): a local server, slower per token than a hosted one.
pub fn is_loopback_url(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url.trim()) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Returns the server root for an OpenAI-compatible base URL, as shown to
/// the user: `http://host:8080/v1/` → `http://host:8080`, without any user
/// name or password.
pub fn server_root(base_url: &str) -> String {
    match root_url(base_url) {
        Ok(url) => url.as_str().trim_end_matches('/').to_owned(),
        Err(_) => "(an invalid base URL)".to_owned(),
    }
}

/// Returns a base URL as it may be shown or logged: its path kept, but
/// without any user name, password or fragment, and with every query value
/// replaced by `[REDACTED]` (`transport::shown_url`).
pub fn shown_url(base_url: &str) -> String {
    match reqwest::Url::parse(base_url.trim()) {
        Ok(url) => crate::transport::shown_url(&url),
        Err(_) => "(an invalid base URL)".to_owned(),
    }
}

/// Drops a URL's user name and password (a URL that cannot have them,
/// such as `data:`, has none to drop).
fn strip_credentials(url: &mut reqwest::Url) {
    let _ = url.set_username("");
    let _ = url.set_password(None);
}

/// The root as a URL: the path without a trailing `/v1`, no user info. A
/// query or fragment is refused: the endpoints cannot be joined to it
/// without guessing.
fn root_url(base_url: &str) -> Result<reqwest::Url, String> {
    let mut url = reqwest::Url::parse(base_url.trim())
        .map_err(|err| format!("the base URL is not a URL ({err})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the base URL is not http or https".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(
            "the base URL has a query or fragment, so its endpoints cannot be derived".to_owned(),
        );
    }
    // Never shown; the requests authenticate with them separately.
    strip_credentials(&mut url);
    let path = url.path().trim_end_matches('/');
    let path = path.strip_suffix("/v1").unwrap_or(path).to_owned();
    url.set_path(&path);
    Ok(url)
}

/// `root` joined with an endpoint path.
fn endpoint(root: &reqwest::Url, path: &str) -> reqwest::Url {
    let mut url = root.clone();
    let base = root.path().trim_end_matches('/');
    url.set_path(&format!("{base}/{path}"));
    url
}

/// What a connection that could not be made is reported as.
const UNREACHABLE: &str = "connection refused or unreachable";

/// Asks the server behind `base_url` for the window it serves `model`
/// with. `api_key`, when given, is sent as a bearer token; credentials in
/// the URL are sent as basic authentication and never shown.
pub async fn server_context_window(
    base_url: &str,
    model: &str,
    api_key: Option<&str>,
) -> Result<ServerWindow, ProbeError> {
    let root = root_url(base_url).map_err(|why| ProbeError {
        attempts: vec![why],
    })?;
    let basic = reqwest::Url::parse(base_url.trim())
        .ok()
        .filter(|url| !url.username().is_empty())
        .map(|url| (url.username().to_owned(), url.password().map(str::to_owned)));
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        // The requests may carry a key or basic credentials: like the model
        // clients, follow no redirect, so they never reach another origin.
        .redirect(crate::transport::no_redirects())
        .build()
        .map_err(|err| ProbeError {
            attempts: vec![format!("cannot build the HTTP client: {err}")],
        })?;
    let mut attempts = Vec::new();
    let mut unreachable_only = true;
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
        let url = endpoint(&root, path);
        let mut request = match &body {
            Some(body) => client.post(url.clone()).json(body),
            None => client.get(url.clone()),
        };
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        } else if let Some((user, password)) = &basic {
            request = request.basic_auth(user, password.as_deref());
        }
        let fetched = fetch(request).await;
        unreachable_only &= matches!(&fetched, Err(why) if why == UNREACHABLE);
        let attempt = match fetched {
            Ok(json) => match read(&json, model) {
                Some((Some(tokens), field)) if (1..=MAX_WINDOW).contains(&tokens) => {
                    return Ok(ServerWindow {
                        tokens,
                        source: format!("{field} from {url}"),
                    });
                }
                Some((Some(tokens), field)) => format!("{field} {tokens} is not a window"),
                Some((None, field)) => format!("{field} is not a whole number of tokens"),
                None => format!("no window for {model}"),
            },
            Err(why) => why,
        };
        attempts.push(format!("{url}: {attempt}"));
    }
    if unreachable_only {
        attempts.push("is it running?".to_owned());
    }
    Err(ProbeError { attempts })
}

async fn fetch(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let mut response = request.send().await.map_err(|err| {
        if err.is_timeout() {
            "no answer within 3 s".to_owned()
        } else if err.is_connect() {
            UNREACHABLE.to_owned()
        } else {
            "request failed".to_owned()
        }
    })?;
    let status = response.status();
    if status.is_redirection() {
        let error = crate::transport::redirect_error(
            status.as_u16(),
            response.url().as_str(),
            response.headers(),
        );
        return Err(error.to_string());
    }
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    let mut body = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|err| {
            if err.is_timeout() {
                "no complete answer within 3 s".to_owned()
            } else {
                "the reply broke off".to_owned()
            }
        })?;
        let Some(chunk) = chunk else { break };
        body.extend_from_slice(&chunk);
        if body.len() > MAX_BODY {
            return Err("the reply is over 1 MiB".to_owned());
        }
    }
    serde_json::from_slice(&body).map_err(|_| "the reply is not JSON".to_owned())
}

/// llama.cpp: `default_generation_settings.n_ctx` (per slot), else the
/// top-level `n_ctx`.
fn llama_cpp_props(json: &Value, _model: &str) -> Option<(Option<u64>, &'static str)> {
    json.pointer("/default_generation_settings/n_ctx")
        .or_else(|| json.get("n_ctx"))
        .map(|n| (n.as_u64(), "n_ctx"))
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
fn ollama_ps(json: &Value, model: &str) -> Option<(Option<u64>, &'static str)> {
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
        .get("context_length")
        .map(|n| (n.as_u64(), "context_length of the loaded model"))
}

/// Ollama: `num_ctx` in the model's `parameters` (one `key value` per line).
fn ollama_show(json: &Value, _model: &str) -> Option<(Option<u64>, &'static str)> {
    json.get("parameters")?.as_str()?.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("num_ctx"))
            .then(|| (words.next().and_then(|n| n.parse().ok()), "num_ctx"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls_are_this_machine() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434",
            "http://[::1]:1/v1",
            "http://127.3.4.5",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "http://10.0.0.2:8080",
            "not a url",
            "http://localhost.example.com",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }
    use serde_json::json;

    #[test]
    fn the_root_drops_v1_and_slashes() {
        assert_eq!(server_root("http://h:8080/v1/"), "http://h:8080");
        assert_eq!(server_root("http://h:8080"), "http://h:8080");
        assert_eq!(server_root("http://h/openai/v1"), "http://h/openai");
        assert_eq!(
            server_root("http://user:hunter2@h:8080/v1"),
            "http://h:8080",
            "credentials are never shown"
        );
        assert_eq!(
            server_root("http://h/v1?token=abc"),
            "(an invalid base URL)"
        );
        assert_eq!(
            root_url("http://h/v1#frag").unwrap_err(),
            "the base URL has a query or fragment, so its endpoints cannot be derived"
        );
        assert_eq!(
            endpoint(&root_url("http://h:1/openai/v1/").unwrap(), "props").as_str(),
            "http://h:1/openai/props"
        );
    }

    #[test]
    fn a_shown_url_keeps_its_path_but_never_its_credentials() {
        assert_eq!(
            shown_url("https://user:hunter2@h:8080/v1"),
            "https://h:8080/v1"
        );
        assert_eq!(
            shown_url(" http://h/v1?key=sk-secret&flag#frag "),
            "http://h/v1?key=[REDACTED]&flag"
        );
        assert_eq!(shown_url("not a url"), "(an invalid base URL)");
    }

    #[test]
    fn each_server_shape_is_read() {
        let props = json!({"default_generation_settings": {"n_ctx": 8192}, "n_ctx": 16384});
        assert_eq!(llama_cpp_props(&props, "x"), Some((Some(8192), "n_ctx")));
        assert_eq!(
            llama_cpp_props(&json!({"n_ctx": 4096}), "x"),
            Some((Some(4096), "n_ctx"))
        );
        for odd in [json!("4096"), json!(4096.5), json!(-4096), json!(1e30)] {
            assert_eq!(
                llama_cpp_props(&json!({ "n_ctx": odd }), "x"),
                Some((None, "n_ctx")),
                "{odd}"
            );
        }
        let ps = json!({"models": [
            {"name": "llama3:latest", "context_length": 2048},
            {"name": "qwen3:latest", "model": "qwen3:latest", "context_length": 32768},
        ]});
        assert_eq!(
            ollama_ps(&ps, "qwen3"),
            Some((Some(32768), "context_length of the loaded model"))
        );
        assert_eq!(ollama_ps(&ps, "qwen3:8b"), None);
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx                        12288\n",
                          "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_show(&show, "q"), Some((Some(12288), "num_ctx")));
        assert_eq!(
            ollama_show(&json!({"model_info": {"qwen2.context_length": 32768}}), "q"),
            None,
            "the trained length is not the served window"
        );
    }
}
