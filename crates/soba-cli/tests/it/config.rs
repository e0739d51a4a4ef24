//! Configuration (SPEC §14): precedence, project-file restrictions, unknown
//! keys with hints, aliases, model resolution, keys only from variables,
//! and the JSON Schema agreeing with the loader. The loader gets an explicit
//! environment and files in a temporary folder: nothing real is read.

use std::path::PathBuf;

use serde_json::{Value, json};
use soba_workspace::config::{
    self, ConfigError, LoadInput, Loaded, NO_MODEL_MESSAGE, Source, schema,
};
use soba_workspace::paths::Env;

use crate::support::{Sandbox, text};

struct Files {
    _dir: tempfile::TempDir,
    user: PathBuf,
    project: PathBuf,
}

fn files(user: Option<Value>, project: Option<Value>) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let user_path = dir.path().join("user.json");
    let project_path = dir.path().join("project.json");
    if let Some(user) = user {
        std::fs::write(&user_path, user.to_string()).unwrap();
    }
    if let Some(project) = project {
        std::fs::write(&project_path, project.to_string()).unwrap();
    }
    Files {
        _dir: dir,
        user: user_path,
        project: project_path,
    }
}

fn load(files: &Files, env: &[(&str, &str)], sets: &[&str]) -> Result<Loaded, ConfigError> {
    let env = Env::from_pairs(env.iter().copied());
    let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
    config::load(&LoadInput {
        env: &env,
        user_file: &files.user,
        project_file: Some(&files.project),
        sets: &sets,
    })
}

fn error(files: &Files, env: &[(&str, &str)], sets: &[&str]) -> String {
    load(files, env, sets)
        .expect_err("the configuration must be refused")
        .to_string()
}

fn setting<'a>(loaded: &'a Loaded, key: &str) -> (&'a Value, &'a Source) {
    let row = loaded
        .settings
        .iter()
        .find(|(path, _)| path.to_string() == key)
        .unwrap_or_else(|| panic!("{key} is not set"));
    (&row.1.value, &row.1.source)
}

#[test]
fn later_sources_win_and_are_named() {
    let f = files(
        Some(
            json!({"model": "anthropic/claude-sonnet-4-5", "compaction": {"keepRecentTokens": 10000, "timeoutMs": 1000, "hygieneRatio": 0.4}}),
        ),
        Some(
            json!({"model": "openai/gpt-5", "compaction": {"keepRecentTokens": 15000, "timeoutMs": 2000}}),
        ),
    );
    let loaded = load(
        &f,
        &[("SOBA_COMPACTION__KEEP_RECENT_TOKENS", "25000")],
        &["compaction.timeoutMs=3000"],
    )
    .unwrap();
    let c = &loaded.config.compaction;
    assert_eq!(c.keep_recent_tokens.get(), 25_000);
    assert_eq!(c.timeout_ms, 3_000);
    assert_eq!(c.hygiene_ratio.to_string(), "0.4");
    assert_eq!(c.min_savings_ratio.to_string(), "0.25");
    assert_eq!(
        setting(&loaded, "compaction.keepRecentTokens").1,
        &Source::Env("SOBA_COMPACTION__KEEP_RECENT_TOKENS".into())
    );
    assert_eq!(
        setting(&loaded, "compaction.timeoutMs").1,
        &Source::Flag("--set compaction.timeoutMs=3000".into())
    );
    assert_eq!(
        setting(&loaded, "compaction.hygieneRatio").1,
        &Source::UserFile(f.user.clone())
    );
    assert_eq!(
        setting(&loaded, "model").1,
        &Source::ProjectFile(f.project.clone())
    );
    // The project's model wins over the user's; SOBA_MODEL over both;
    // --model over everything.
    let env = Env::default();
    assert_eq!(
        loaded.config.resolve_model(None, &env).unwrap().id,
        "openai/gpt-5"
    );
    let with_env = load(&f, &[("SOBA_MODEL", "openrouter/qwen/qwen3-coder")], &[]).unwrap();
    assert_eq!(
        with_env.config.resolve_model(None, &env).unwrap().id,
        "openrouter/qwen/qwen3-coder"
    );
    let flagged = with_env
        .config
        .resolve_model(Some("ollama/qwen3"), &env)
        .unwrap();
    assert_eq!(
        (flagged.id.as_str(), flagged.reason.as_str()),
        ("ollama/qwen3", "--model")
    );
}

#[test]
fn model_falls_back_to_the_first_provider_with_a_key() {
    let f = files(None, None);
    let loaded = load(&f, &[], &[]).unwrap();
    let resolve = |vars: &[(&str, &str)]| {
        loaded
            .config
            .resolve_model(None, &Env::from_pairs(vars.iter().copied()))
            .map(|model| model.id)
    };
    assert_eq!(
        resolve(&[("OPENROUTER_API_KEY", "k"), ("OPENAI_API_KEY", "k")]).unwrap(),
        "openai/gpt-5"
    );
    assert_eq!(
        resolve(&[("ANTHROPIC_API_KEY", "k"), ("OPENAI_API_KEY", "k")]).unwrap(),
        "anthropic/claude-sonnet-4-5"
    );
    assert_eq!(
        resolve(&[("OPENROUTER_API_KEY", "k")]).unwrap(),
        "openrouter/anthropic/claude-sonnet-4.5"
    );
    // An empty variable is not a key.
    let err = resolve(&[("ANTHROPIC_API_KEY", "")]).unwrap_err();
    assert!(matches!(err, ConfigError::NoModel));
    assert_eq!(err.to_string(), NO_MODEL_MESSAGE);
    assert_eq!(
        NO_MODEL_MESSAGE,
        "no model configured: set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENROUTER_API_KEY, or pass --model ollama/<name>; soba demo and soba replay work offline"
    );
    // The user may rename a built-in provider's key variable.
    let renamed = files(
        Some(json!({"providers": {"anthropic": {"apiKeyEnv": "MY_CLAUDE_KEY"}}})),
        None,
    );
    let loaded = load(&renamed, &[], &[]).unwrap();
    let env = Env::from_pairs([("MY_CLAUDE_KEY", "k")]);
    let model = loaded.config.resolve_model(None, &env).unwrap();
    assert_eq!(model.id, "anthropic/claude-sonnet-4-5");
    assert_eq!(model.reason, "MY_CLAUDE_KEY is set");
}

#[test]
fn keys_come_only_from_the_named_variable() {
    let f = files(
        Some(
            json!({"providers": {"local": {"api": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": "LOCAL_KEY"}}}),
        ),
        None,
    );
    let loaded = load(&f, &[], &[]).unwrap();
    let provider = &loaded.config.providers["local"];
    let missing = loaded
        .config
        .endpoint(provider, &Env::default())
        .unwrap_err();
    assert_eq!(
        missing.to_string(),
        "LOCAL_KEY is not set: export the API key of provider local in LOCAL_KEY"
    );
    let endpoint = loaded
        .config
        .endpoint(provider, &Env::from_pairs([("LOCAL_KEY", "sk-test-123")]))
        .unwrap();
    assert_eq!(endpoint.api_key.as_deref(), Some("sk-test-123"));
    assert_eq!(endpoint.base_url, "http://127.0.0.1:9/v1");
    // A key written into a file is an unknown key, never read.
    let with_key = files(
        Some(json!({"providers": {"anthropic": {"apiKey": "sk-ant-secret"}}})),
        None,
    );
    let message = error(&with_key, &[], &[]);
    assert!(
        message.starts_with("unknown key providers.anthropic.apiKey in user config"),
        "{message}"
    );
    assert!(
        message.ends_with("did you mean providers.anthropic.apiKeyEnv?"),
        "{message}"
    );
    assert!(!message.contains("sk-ant-secret"));
    // Ollama needs no key.
    let loaded = load(&files(None, None), &[], &[]).unwrap();
    let ollama = loaded
        .config
        .endpoint(&loaded.config.providers["ollama"], &Env::default())
        .unwrap();
    assert_eq!(ollama.api_key, None);
}

#[test]
fn project_files_may_not_redirect_providers_or_keys() {
    for (project, key) in [
        (
            json!({"providers": {"anthropic": {"baseUrl": "https://evil.example"}}}),
            "providers.anthropic.baseUrl",
        ),
        (
            json!({"providers": {"evil": {"apiKeyEnv": "ANTHROPIC_API_KEY"}}}),
            "providers.evil.apiKeyEnv",
        ),
        (json!({"tools": {"allow": ["bash"]}}), "tools.allow"),
        (
            json!({"tools": {"bash": {"timeoutMs": 1000}}}),
            "tools.bash.timeoutMs",
        ),
        (
            json!({"session": {"durability": "flush"}}),
            "session.durability",
        ),
    ] {
        let f = files(None, Some(project));
        let message = error(&f, &[], &[]);
        assert_eq!(
            message,
            format!(
                "{key} is not allowed in the project config {}: a project file may set only model, compaction.* and models.*.{{contextWindow,maxOutputTokens,tokenizer}}; move it to your user config",
                f.project.display()
            )
        );
    }
    // Allowed: model, compaction.*, model limits.
    let f = files(
        None,
        Some(
            json!({"model": "anthropic/claude-opus-4-5", "compaction": {"keepRecentTokens": 30000, "summarizer": {"model": "deterministic"}}, "models": {"ollama/qwen3": {"contextWindow": 32768, "maxOutputTokens": 8192, "tokenizer": "cl100k_base"}}}),
        ),
    );
    let loaded = load(&f, &[], &[]).unwrap();
    assert_eq!(
        loaded.config.models["ollama/qwen3"].context_window,
        Some(32_768)
    );
    assert_eq!(
        loaded.config.compaction.summarizer.model.as_deref(),
        Some("deterministic")
    );
}

#[test]
fn project_models_must_name_a_trusted_provider() {
    let untrusted = files(None, Some(json!({"model": "evil/gpt-5"})));
    assert_eq!(
        error(&untrusted, &[], &[]),
        format!(
            "model = \"evil/gpt-5\" in the project config {} names provider \"evil\", which is neither built in nor defined in your user config; define providers.evil in your user config or use another model",
            untrusted.project.display()
        )
    );
    let summarizer = files(
        None,
        Some(json!({"compaction": {"summarizer": {"model": "evil/cheap"}}})),
    );
    assert!(
        error(&summarizer, &[], &[]).starts_with("compaction.summarizer.model = \"evil/cheap\"")
    );
    // A provider the user defined is trusted; so is a bare built-in name.
    let defined = files(
        Some(
            json!({"providers": {"work": {"api": "openai-chat", "baseUrl": "https://llm.work.example/v1", "apiKeyEnv": "WORK_KEY"}}}),
        ),
        Some(json!({"model": "work/big-model"})),
    );
    assert!(load(&defined, &[], &[]).is_ok());
    let bare = files(None, Some(json!({"model": "claude-sonnet-4-5"})));
    assert!(load(&bare, &[], &[]).is_ok());
    let bare_unknown = files(None, Some(json!({"model": "mystery"})));
    assert!(error(&bare_unknown, &[], &[]).contains("names provider \"\""));
}

#[test]
fn unknown_keys_say_did_you_mean() {
    let typo = files(Some(json!({"compaction": {"keepRecentToken": 1}})), None);
    assert_eq!(
        error(&typo, &[], &[]),
        format!(
            "unknown key compaction.keepRecentToken in user config {}; did you mean compaction.keepRecentTokens?",
            typo.user.display()
        )
    );
    let misplaced = files(Some(json!({"keepRecentTokens": 1})), None);
    assert!(error(&misplaced, &[], &[]).ends_with("did you mean compaction.keepRecentTokens?"));
    let nothing_close = files(None, Some(json!({"compaction": {"zzzzzzzz": 1}})));
    assert_eq!(
        error(&nothing_close, &[], &[]),
        format!(
            "unknown key compaction.zzzzzzzz in project config {}",
            nothing_close.project.display()
        )
    );
    let f = files(None, None);
    assert_eq!(
        error(&f, &[("SOBA_COMPACTION__KEEP_RECENT", "5")], &[]),
        "unknown key compaction.keepRecent in environment variable SOBA_COMPACTION__KEEP_RECENT; did you mean compaction.keepRecentTokens (SOBA_COMPACTION__KEEP_RECENT_TOKENS)?"
    );
    assert_eq!(
        error(&f, &[], &["compaction.sumarizer.model=x"]),
        "unknown key compaction.sumarizer.model in --set compaction.sumarizer.model=x; did you mean compaction.summarizer.model?"
    );
    assert_eq!(
        error(&f, &[], &["compaction.keepRecentTokens"]),
        "--set 'compaction.keepRecentTokens': expected PATH=VALUE, e.g. --set compaction.keepRecentTokens=30000"
    );
    // No key before the `=`: the argument is named as given, not an empty key.
    for given in ["=", "=1", ".=1", " =x"] {
        assert_eq!(
            error(&f, &[], &[given]),
            format!(
                "--set '{given}': expected PATH=VALUE, e.g. --set compaction.keepRecentTokens=30000"
            )
        );
    }
    for (name, value) in [
        ("SOBA_", "1"),
        ("SOBA_COMPACTION__", "5"),
        ("SOBA___MODEL", "x"),
    ] {
        assert_eq!(
            error(&f, &[(name, value)], &[]),
            format!(
                "environment variable '{name}={value}' names no setting: expected SOBA_<KEY>=value, with __ between nested keys, e.g. SOBA_COMPACTION__KEEP_RECENT_TOKENS=30000"
            )
        );
    }
    // SOBA_HOME and SOBA_LOG are not settings; empty variables are unset.
    let loaded = load(
        &f,
        &[
            ("SOBA_HOME", "/x"),
            ("SOBA_LOG", "debug"),
            ("SOBA_MODEL", ""),
        ],
        &[],
    )
    .unwrap();
    assert!(loaded.settings.is_empty());
    // `--set model=` clears a configured model.
    let with_model = files(Some(json!({"model": "openai/gpt-5"})), None);
    let cleared = load(&with_model, &[], &["model="]).unwrap();
    assert_eq!(cleared.config.model, None);
}

#[test]
fn wrong_types_name_the_key_and_what_it_takes() {
    let f = files(Some(json!({"compaction": {"auto": "yes"}})), None);
    assert_eq!(
        error(&f, &[], &[]),
        format!(
            "compaction.auto in user config {} must be true or false, not \"yes\"",
            f.user.display()
        )
    );
    let f = files(None, None);
    assert_eq!(
        error(&f, &[], &["tools.bash.timeoutMs=700000"]),
        "tools.bash.timeoutMs in --set tools.bash.timeoutMs=700000 must be an integer from 1 to 600000, not 700000"
    );
    assert_eq!(
        error(&f, &[], &["models.ollama/x.tokenizer=sentencepiece"]),
        "models.\"ollama/x\".tokenizer in --set models.ollama/x.tokenizer=sentencepiece must be one of \"o200k_base\", \"cl100k_base\", not \"sentencepiece\""
    );
    let not_object = files(Some(json!({"compaction": 3})), None);
    assert!(error(&not_object, &[], &[]).contains("compaction in user config"));
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\n  \"model\": ,\n}").unwrap();
    let message = config::load(&LoadInput {
        env: &Env::default(),
        user_file: &broken,
        project_file: None,
        sets: &[],
    })
    .unwrap_err()
    .to_string();
    assert!(
        message.starts_with(&format!(
            "{} is not valid JSON (line 2, column",
            broken.display()
        )),
        "{message}"
    );
}

#[test]
fn aliases_and_the_deprecated_timeout() {
    let f = files(
        Some(json!({"compaction": {"retentionBudgetTokens": 12345}})),
        None,
    );
    let loaded = load(&f, &[], &[]).unwrap();
    assert_eq!(loaded.config.compaction.keep_recent_tokens.get(), 12_345);
    assert!(loaded.warnings.is_empty());

    let f = files(
        Some(json!({"compaction": {"backgroundTimeoutMs": 9000}})),
        None,
    );
    let loaded = load(&f, &[], &[]).unwrap();
    assert_eq!(loaded.config.compaction.timeout_ms, 9_000);
    assert_eq!(
        loaded.warnings,
        [format!(
            "compaction.backgroundTimeoutMs (user config {}) is deprecated; rename it to compaction.timeoutMs",
            f.user.display()
        )]
    );
    // timeoutMs wins when both are set, in either order and across sources.
    for user in [
        json!({"compaction": {"timeoutMs": 7000, "backgroundTimeoutMs": 9000}}),
        json!({"compaction": {"backgroundTimeoutMs": 9000, "timeoutMs": 7000}}),
    ] {
        let f = files(Some(user), None);
        let loaded = load(&f, &[], &[]).unwrap();
        assert_eq!(loaded.config.compaction.timeout_ms, 7_000);
        assert!(
            loaded.warnings[0]
                .contains("is deprecated and ignored because compaction.timeoutMs is set")
        );
    }
    let f = files(
        Some(json!({"compaction": {"timeoutMs": 7000}})),
        Some(json!({"compaction": {"backgroundTimeoutMs": 9000}})),
    );
    assert_eq!(
        load(&f, &[], &[]).unwrap().config.compaction.timeout_ms,
        7_000
    );
}

#[test]
fn user_providers_need_api_and_base_url() {
    let f = files(
        Some(json!({"providers": {"x": {"baseUrl": "http://h"}}})),
        None,
    );
    assert_eq!(
        error(&f, &[], &[]),
        "providers.x has no api: a provider needs api (anthropic-messages, openai-chat or openai-responses) and baseUrl"
    );
    // A built-in provider may change only its base URL.
    let f = files(
        Some(json!({"providers": {"anthropic": {"baseUrl": "https://proxy.example"}}})),
        None,
    );
    let loaded = load(&f, &[], &[]).unwrap();
    let anthropic = &loaded.config.providers["anthropic"];
    assert_eq!(anthropic.base_url, "https://proxy.example");
    assert_eq!(anthropic.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
}

// ---------------------------------------------------------------------------
// The schema agrees with the loader.

/// Validates `value` against the subset of JSON Schema `soba config schema`
/// uses (type, enum, minimum/maximum/exclusiveMinimum, pattern, anyOf,
/// properties, additionalProperties, items).
fn validate(schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
        let matched = options.iter().any(|option| {
            let mut inner = Vec::new();
            validate(option, value, at, &mut inner);
            inner.is_empty()
        });
        if !matched {
            errors.push(format!("{at}: matches no anyOf option"));
        }
        return;
    }
    if let Some(kind) = schema.get("type") {
        let kinds: Vec<&str> = match kind {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let ok = kinds.iter().any(|kind| match *kind {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "integer" => value.is_u64() || value.is_i64(),
            "number" => value.is_number(),
            _ => false,
        });
        if !ok {
            errors.push(format!("{at}: {value} is not {kinds:?}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} not in enum"));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            errors.push(format!("{at}: {n} < {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            errors.push(format!("{at}: {n} > {max}"));
        }
        if let Some(min) = schema.get("exclusiveMinimum").and_then(Value::as_f64)
            && n <= min
        {
            errors.push(format!("{at}: {n} <= {min}"));
        }
    }
    if let (Some(pattern), Some(text)) = (
        schema.get("pattern").and_then(Value::as_str),
        value.as_str(),
    ) && !regex::Regex::new(pattern).unwrap().is_match(text)
    {
        errors.push(format!("{at}: {text:?} does not match {pattern}"));
    }
    if let Some(items) = value.as_array()
        && let Some(item_schema) = schema.get("items")
    {
        for (idx, item) in items.iter().enumerate() {
            validate(item_schema, item, &format!("{at}[{idx}]"), errors);
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, child) in object {
            let path = format!("{at}.{key}");
            match properties.and_then(|p| p.get(key)) {
                Some(child_schema) => validate(child_schema, child, &path, errors),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => errors.push(format!("{path}: not allowed")),
                    Some(extra) if extra.is_object() => validate(extra, child, &path, errors),
                    _ => {}
                },
            }
        }
    }
}

fn schema_errors(value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate(&schema::schema(), value, "$", &mut errors);
    errors
}

#[test]
fn the_schema_validates_what_the_loader_accepts_and_rejects_the_rest() {
    // The merged defaults, as `soba config show --json` prints them.
    let defaults = load(&files(None, None), &[], &[]).unwrap().to_json();
    assert_eq!(schema_errors(&defaults), Vec::<String>::new());
    assert_eq!(defaults["compaction"]["keepRecentTokens"], json!(20000));
    assert_eq!(
        defaults["providers"]["openrouter"]["baseUrl"],
        json!("https://openrouter.ai/api/v1")
    );
    let good = [
        json!({"model": "ollama/qwen3-coder", "models": {"ollama/qwen3-coder": {"contextWindow": 32768, "maxOutputTokens": 8192, "tokenizer": "o200k_base"}}}),
        json!({"providers": {"vllm": {"api": "openai-chat", "baseUrl": "http://gpu:8000/v1", "apiKeyEnv": null}}}),
        json!({"compaction": {"minSavingsRatio": "0.3", "autoCompactThresholdRatio": 0.75, "maxWorkingSetTokens": null, "summarizer": {"model": "deterministic", "maxOutputTokens": 1500}, "hygieneProtectedTools": ["read_file"], "backgroundTimeoutMs": 1, "retentionBudgetTokens": 300}}),
        json!({"session": {"durability": "flush"}, "tools": {"allow": ["bash"], "bash": {"timeoutMs": 600000}}}),
    ];
    for config in good {
        let f = files(Some(config.clone()), None);
        assert!(load(&f, &[], &[]).is_ok(), "loader refused {config}");
        assert_eq!(schema_errors(&config), Vec::<String>::new(), "{config}");
    }
    let bad = [
        json!({"modle": "x"}),
        json!({"compaction": {"auto": "yes"}}),
        json!({"compaction": {"native": "on"}}),
        json!({"compaction": {"minSavingsRatio": "lots"}}),
        json!({"compaction": {"summarizer": {"maxOutputTokens": 0}}}),
        json!({"models": {"x/y": {"contextWindow": 0}}}),
        json!({"models": {"x/y": {"tokenizer": "gpt2"}}}),
        json!({"providers": {"x": {"api": "gemini"}}}),
        json!({"tools": {"bash": {"timeoutMs": 600001}}}),
        json!({"tools": {"allow": "bash"}}),
        json!({"session": {"durability": "sometimes"}}),
    ];
    for config in bad {
        let f = files(Some(config.clone()), None);
        assert!(load(&f, &[], &[]).is_err(), "loader accepted {config}");
        assert!(
            !schema_errors(&config).is_empty(),
            "schema accepted {config}"
        );
    }
}

// ---------------------------------------------------------------------------
// The binary.

#[test]
fn config_show_names_every_source() {
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({"compaction": {"hygieneRatio": 0.4}}));
    sandbox.write_project_config(&json!({"compaction": {"keepRecentTokens": 15000}}));
    sandbox.env = vec![("SOBA_COMPACTION__TIMEOUT_MS".into(), "5000".into())];
    let output = sandbox.run_ok(&["config", "show", "--set", "compaction.imageTokens=900"]);
    let stdout = text(&output.stdout);
    let line = |key: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} line in\n{stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line("compaction.hygieneRatio"),
        format!(
            "compaction.hygieneRatio = 0.4 # user config {}",
            sandbox.home.join("config.json").display()
        )
    );
    assert_eq!(
        line("compaction.keepRecentTokens"),
        format!(
            "compaction.keepRecentTokens = 15000 # project config {}",
            sandbox.ws.join(".soba/config.json").display()
        )
    );
    assert_eq!(
        line("compaction.timeoutMs"),
        "compaction.timeoutMs = 5000 # environment variable SOBA_COMPACTION__TIMEOUT_MS"
    );
    assert_eq!(
        line("compaction.imageTokens"),
        "compaction.imageTokens = 900 # --set compaction.imageTokens=900"
    );
    assert_eq!(
        line("compaction.minSavingsRatio"),
        "compaction.minSavingsRatio = 0.25"
    );
    assert!(stdout.contains("# key variables: ANTHROPIC_API_KEY not set"));
    assert!(stdout.ends_with(&format!("# model in use: none: {NO_MODEL_MESSAGE}\n")));

    let json_output = sandbox.run_ok(&["config", "show", "--json"]);
    let document: Value = serde_json::from_slice(&json_output.stdout).unwrap();
    assert_eq!(
        document["config"]["compaction"]["keepRecentTokens"],
        json!(15000)
    );
    assert_eq!(
        document["sources"]["compaction.timeoutMs"],
        json!("environment variable SOBA_COMPACTION__TIMEOUT_MS")
    );
    assert_eq!(document["model"], Value::Null);
    assert_eq!(schema_errors(&document["config"]), Vec::<String>::new());
}

#[test]
fn config_errors_exit_1_and_bad_set_syntax_exits_2() {
    let sandbox = Sandbox::new();
    sandbox.write_project_config(
        &json!({"providers": {"anthropic": {"baseUrl": "https://evil.example"}}}),
    );
    let output = sandbox.run(&["sessions"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr
            .starts_with("error: providers.anthropic.baseUrl is not allowed in the project config"),
        "{stderr}"
    );
    let clean = Sandbox::new();
    let output = clean.run(&["sessions", "--set", "compaction.keepRecentTokens"]);
    assert_eq!(output.status.code(), Some(2));
    let output = clean.run(&["sessions", "--set", "compaction.keepRecentTokns=1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("did you mean compaction.keepRecentTokens?"));
}

#[test]
fn config_schema_is_json_schema() {
    let sandbox = Sandbox::new();
    let output = sandbox.run_ok(&["config", "schema"]);
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(printed, schema::schema());
    assert_eq!(printed["$schema"], json!(schema::DRAFT));
    assert_eq!(
        printed["properties"]["compaction"]["properties"]["keepRecentTokens"]["default"],
        json!(20000)
    );
}

#[test]
fn completions_are_printed() {
    let sandbox = Sandbox::new();
    let output = sandbox.run_ok(&["completions", "bash"]);
    let script = text(&output.stdout);
    assert!(script.contains("_soba()"), "{script}");
    assert!(script.contains("capsule"));
    assert_eq!(sandbox.run(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn config_show_prints_the_defaults() {
    let sandbox = Sandbox::new();
    let output = sandbox.run_ok(&["config", "show"]);
    let normalized = text(&output.stdout)
        .replace(&sandbox.home.display().to_string(), "[SOBA_HOME]")
        .replace(&sandbox.ws.display().to_string(), "[WS]");
    insta::assert_snapshot!(normalized);
}

/// Issue 36 item 4: on a 32,768-token window some compaction values are
/// scaled; `config show` says which and to what, with the figures `soba
/// budget` uses (its safetyReserveTokens line), not a copy of the rule.
#[test]
fn config_show_marks_the_values_scaled_for_a_small_window() {
    let sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "model": "ollama/qwen3-coder",
        "models": {"ollama/qwen3-coder": {"contextWindow": 32768, "maxOutputTokens": 8192}},
        "compaction": {"minHygieneTokens": 7000}
    }));
    let stdout = text(&sandbox.run_ok(&["config", "show"]).stdout);
    let budget = text(
        &sandbox
            .run_ok(&[
                "budget",
                "--context-window",
                "32768",
                "--max-output",
                "8192",
            ])
            .stdout,
    );
    let reserve = budget
        .lines()
        .find_map(|line| line.strip_prefix("safetyReserveTokens"))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap();
    let line = |key: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(&format!("compaction.{key} = ")))
            .unwrap_or_else(|| panic!("no {key} line in\n{stdout}"))
            .to_owned()
    };
    assert_eq!(
        line("safetyReserveTokens"),
        format!("compaction.safetyReserveTokens = 8192 (scaled to {reserve} for this window)")
    );
    assert!(
        line("minTokensForAutoCompact").ends_with(" for this window)"),
        "{stdout}"
    );
    // A value set by hand is not scaled, nor one no window changes.
    assert!(!line("minHygieneTokens").contains("scaled"), "{stdout}");
    assert_eq!(line("minSavingsRatio"), "compaction.minSavingsRatio = 0.25");
    assert!(
        stdout.ends_with(
            "# its 32,768-token window is small: the values marked scaled are in force (`soba budget` shows the limits they give)\n"
        ),
        "{stdout}"
    );
    let json_output = sandbox.run_ok(&["config", "show", "--json"]);
    let document: Value = serde_json::from_slice(&json_output.stdout).unwrap();
    assert_eq!(
        document["scaled"]["compaction.safetyReserveTokens"].to_string(),
        reserve.replace(',', "")
    );
    // A large window scales nothing.
    let large = Sandbox::new();
    large.write_user_config(&json!({"model": "anthropic/claude-sonnet-4-5"}));
    let stdout = text(&large.run_ok(&["config", "show"]).stdout);
    assert!(!stdout.contains("scaled"), "{stdout}");
}

/// Writes `user` and `project` as raw text (not re-encoded by serde_json,
/// which could not hold a repeated key).
fn text_files(user: Option<&str>, project: Option<&str>) -> Files {
    let f = files(None, None);
    if let Some(user) = user {
        std::fs::write(&f.user, user).unwrap();
    }
    if let Some(project) = project {
        std::fs::write(&f.project, project).unwrap();
    }
    f
}

#[test]
fn a_repeated_key_in_either_file_is_an_error_naming_file_key_and_line() {
    // The local-model snippet pasted twice, the second one a stale copy.
    let user = "{\n  \"models\": {\"ollama/qwen3-coder\": {\"contextWindow\": 32768}},\n  \"model\": \"ollama/qwen3-coder\",\n  \"models\": {\"ollama/qwen3-coder\": {\"maxOutputTokens\": 8192}}\n}\n";
    let f = text_files(Some(user), None);
    assert_eq!(
        error(&f, &[], &[]),
        format!(
            "{} sets models twice (again on line 4): keep one of them",
            f.user.display()
        )
    );
    let project = "{\"compaction\": {\"keepRecentTokens\": 30000, \"auto\": true,\n \"keepRecentTokens\": 10000}}";
    let f = text_files(None, Some(project));
    assert_eq!(
        error(&f, &[], &[]),
        format!(
            "{} sets compaction.keepRecentTokens twice (again on line 2): keep one of them",
            f.project.display()
        )
    );
}

#[test]
fn config_files_may_start_with_a_byte_order_mark() {
    let f = text_files(
        Some("\u{feff}{\"compaction\": {\"keepRecentTokens\": 30000}}"),
        Some("\u{feff}{\"compaction\": {\"timeoutMs\": 2000}}"),
    );
    let loaded = load(&f, &[], &[]).unwrap();
    assert_eq!(loaded.config.compaction.keep_recent_tokens.get(), 30_000);
    assert_eq!(loaded.config.compaction.timeout_ms, 2000);
}

#[test]
fn tools_allow_names_only_tools_that_ask() {
    let f = files(Some(json!({"tools": {"allow": ["bash", "wirte"]}})), None);
    assert_eq!(
        error(&f, &[], &[]),
        format!(
            "unknown tool \"wirte\" in user config {}: did you mean write? the tools that ask are bash, write (write_file and edit_file), edit (edit_file alone), write_file and edit_file",
            f.user.display()
        )
    );
    let f = files(None, None);
    assert_eq!(
        error(&f, &[("SOBA_TOOLS__ALLOW", "bash,read_file")], &[]),
        "unknown tool \"read_file\" in environment variable SOBA_TOOLS__ALLOW: read_file never asks for approval, so it needs no entry; remove it"
    );
    assert_eq!(
        error(&f, &[], &["tools.allow=[\"rm -rf\"]"]),
        "unknown tool \"rm -rf\" in --set tools.allow=[\"rm -rf\"]: the tools that ask are bash, write (write_file and edit_file), edit (edit_file alone), write_file and edit_file"
    );
    let loaded = load(&f, &[("SOBA_TOOLS__ALLOW", "bash, write,edit_file")], &[]).unwrap();
    assert_eq!(loaded.config.tools_allow, ["bash", "write", "edit_file"]);
}

#[test]
fn an_environment_value_of_the_wrong_form_names_the_variable() {
    let f = files(None, None);
    assert_eq!(
        error(
            &f,
            &[("SOBA_COMPACTION__KEEP_RECENT_TOKENS", "garbage")],
            &[]
        ),
        "compaction.keepRecentTokens in environment variable SOBA_COMPACTION__KEEP_RECENT_TOKENS must be a non-negative integer, not \"garbage\""
    );
    assert_eq!(
        error(&f, &[("SOBA_COMPACTION__AUTO", "yes")], &[]),
        "compaction.auto in environment variable SOBA_COMPACTION__AUTO must be true or false, not \"yes\""
    );
}

/// A `SOBA_*` variable, `SOBA_HOME` or an API key variable holding bytes
/// that are not UTF-8 stops the command (exit 1) naming the variable; it is
/// never read as unset.
#[cfg(unix)]
#[test]
fn variables_that_are_not_utf8_are_errors_naming_them() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"anthropic/\xff");
    let sandbox = Sandbox::new();
    for (name, args) in [
        ("SOBA_MODEL", &["config", "show"][..]),
        ("SOBA_HOME", &["config", "show"][..]),
        (
            "SOBA_COMPACTION__KEEP_RECENT_TOKENS",
            &[
                "budget",
                "--context-window",
                "200000",
                "--max-output",
                "8000",
            ][..],
        ),
        (
            "ANTHROPIC_API_KEY",
            &["run", "--model", "anthropic/claude-sonnet-4-5", "hi"][..],
        ),
    ] {
        let output = sandbox.command(args).env(name, bad).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{name}");
        assert_eq!(
            text(&output.stderr),
            format!(
                "error: environment variable {name} is not valid UTF-8: set it to UTF-8 text (or unset it)\n"
            ),
            "{name}"
        );
    }
}
