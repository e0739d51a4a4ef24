//! Context-overflow classification (SPEC §6.3): one table of the error
//! texts providers really send when a prompt does not fit, with the stated
//! prompt size extracted where the text gives it, and silent-overflow
//! detection for successful responses.
//!
//! Every pattern below was taken from a real error body quoted in a public
//! issue or in source code that reproduces the provider's wording; the
//! `source` of each row says where. Matching is case-insensitive and runs on
//! the raw body, so errors wrapped by proxies (OpenRouter's
//! `metadata.raw`, LiteLLM, claude-code-router) still match.

use std::sync::OnceLock;

use regex::Regex;

/// One known overflow wording.
#[derive(Debug, Clone, Copy)]
pub struct OverflowPattern {
    /// The provider (or server) whose wording this is.
    pub provider: &'static str,
    /// The regex (case-insensitive). Named groups `prompt` (and `prompt2`,
    /// added to it) capture the stated prompt size, `limit` the window.
    pub regex: &'static str,
    /// A real error body with this wording.
    pub example: &'static str,
    /// Where the example was found.
    pub source: &'static str,
}

/// The known overflow wordings, most specific first.
pub const OVERFLOW_PATTERNS: &[OverflowPattern] = &[
    OverflowPattern {
        provider: "anthropic",
        regex: r"prompt is too long: (?P<prompt>\d[\d,]*) tokens > (?P<limit>\d[\d,]*) maximum",
        example: r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208656 tokens > 200000 maximum"}}"#,
        source: "https://github.com/sojohnnysaid/project-guide/issues/2; https://github.com/earendil-works/pi/issues/102",
    },
    OverflowPattern {
        provider: "anthropic",
        regex: r"input length and `?max_tokens`? exceed context limit: (?P<prompt>\d[\d,]*) \+ \d[\d,]* > (?P<limit>\d[\d,]*)",
        example: r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 174167 + 64000 > 200000, decrease input length or `max_tokens` and try again"}}"#,
        source: "https://github.com/kortix-ai/suna/issues/172",
    },
    OverflowPattern {
        provider: "openai",
        regex: r"maximum context length is (?P<limit>\d[\d,]*) tokens\. however, your messages resulted in (?P<prompt>\d[\d,]*) tokens",
        example: r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 204308 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        source: "https://github.com/webtimemachine/wtm2/issues/579",
    },
    OverflowPattern {
        provider: "openai",
        regex: r"your input exceeds the context window of this model",
        example: r#"{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again.","param":"input"}}"#,
        source: "https://github.com/dyad-sh/dyad/issues/1672 (Responses API, also mid-stream)",
    },
    OverflowPattern {
        provider: "deepseek",
        regex: r"maximum context length is (?P<limit>\d[\d,]*) tokens\. however, you requested \d[\d,]* tokens \((?P<prompt>\d[\d,]*) in the messages(?:, (?P<prompt2>\d[\d,]*) in the functions)?",
        example: r#"{"error":{"message":"This model's maximum context length is 131072 tokens. However, you requested 131329 tokens (123137 in the messages, 8192 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
        source: "https://github.com/musistudio/claude-code-router/issues/895; https://github.com/NoFxAiOS/nofx/issues/1278 (same wording from OpenAI and vLLM: https://github.com/vllm-project/vllm/issues/20409)",
    },
    OverflowPattern {
        provider: "vllm",
        regex: r"maximum context length is (?P<limit>\d[\d,]*) tokens\. however, your request has (?P<prompt>\d[\d,]*) input tokens",
        example: r#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, your request has 8 input tokens plus 2045 'max_tokens'. Please reduce one or the other. (parameter=input_tokens, max_tokens, value=(8, 2045))","type":"BadRequestError","param":"input_tokens, max_tokens","code":400}}"#,
        source: "https://github.com/vllm-project/vllm/pull/33425",
    },
    OverflowPattern {
        provider: "vllm",
        regex: r"the prompt \(total length (?P<prompt>\d[\d,]*)\) is too long to fit into the model \(context length (?P<limit>\d[\d,]*)\)",
        example: r#"{"object":"error","message":"The prompt (total length 25938) is too long to fit into the model (context length 4096). Make sure that `max_model_len` is no smaller than the number of text tokens plus multimodal tokens.","type":"BadRequestError","param":null,"code":400}"#,
        source: "https://github.com/vllm-project/vllm/issues/12165",
    },
    OverflowPattern {
        provider: "openai-legacy",
        regex: r"maximum context length is (?P<limit>\d[\d,]*) tokens, however you requested \d[\d,]* tokens \((?P<prompt>\d[\d,]*) in your prompt",
        example: r#"{"error":{"message":"This model's maximum context length is 8192 tokens, however you requested 8977 tokens (8977 in your prompt; 0 for the completion). Please reduce your prompt; or completion length.","type":"invalid_request_error","param":null,"code":null}}"#,
        source: "https://github.com/OpenRouterTeam/openrouter-examples/issues/10",
    },
    OverflowPattern {
        provider: "openrouter",
        regex: r"endpoint's maximum context length is (?P<limit>\d[\d,]*) tokens\. however, you requested about \d[\d,]* tokens \((?P<prompt>\d[\d,]*) of text input(?:, (?P<prompt2>\d[\d,]*) of tool input)?",
        example: r#"{"error":{"message":"This endpoint's maximum context length is 65536 tokens. However, you requested about 92208 tokens (60833 of text input, 10042 of tool input, 21333 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}}"#,
        source: "https://github.com/musistudio/claude-code-router/issues/252; https://github.com/Aider-AI/aider/issues/3721",
    },
    OverflowPattern {
        provider: "google",
        regex: r"the input token count \((?P<prompt>\d[\d,]*)\) exceeds the maximum number of tokens allowed \((?P<limit>\d[\d,]*)\)",
        example: r#"{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
        source: "https://github.com/google-gemini/gemini-cli/issues/6678; https://github.com/google-gemini/gemini-cli/issues/4118",
    },
    OverflowPattern {
        provider: "xai",
        regex: r"maximum prompt length is (?P<limit>\d[\d,]*) but the request contains (?P<prompt>\d[\d,]*) tokens",
        example: r#"{"code":"Client specified an invalid argument","error":"This model's maximum prompt length is 131072 but the request contains 136973 tokens."}"#,
        source: "message text: https://github.com/cline/cline/issues/3120; the JSON envelope is assumed",
    },
    OverflowPattern {
        provider: "llama.cpp",
        regex: r"request \((?P<prompt>\d[\d,]*) tokens\) exceeds the available context size \((?P<limit>\d[\d,]*) tokens\)",
        example: r#"{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,"n_ctx":8192}}"#,
        source: "llama.cpp tools/server/server-context.cpp (ERROR_TYPE_EXCEED_CONTEXT_SIZE), quoted with its JSON in https://github.com/ikawrakow/ik_llama.cpp/pull/2420",
    },
    OverflowPattern {
        provider: "mistral",
        regex: r"prompt contains (?P<prompt>\d[\d,]*) tokens.{0,80}too large for model with (?P<limit>\d[\d,]*) maximum context length",
        example: r#"{"object":"error","message":"Prompt contains 240000 tokens, too large for model with 128000 maximum context length","type":"invalid_request_error"}"#,
        source: "message text: https://github.com/badlogic/pi-mono packages/ai/src/utils/overflow.ts (Mistral row) and https://docs.mistral.ai/resources/known-limitations; the JSON envelope is assumed",
    },
    OverflowPattern {
        provider: "cerebras",
        regex: r"current length is (?P<prompt>\d[\d,]*) while limit is (?P<limit>\d[\d,]*)",
        example: r#"{"message":"Please reduce the length of the messages or completion. Current length is 42328 while limit is 40000","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}"#,
        source: "https://github.com/cline/cline/issues/5140",
    },
    OverflowPattern {
        provider: "groq",
        regex: r"please reduce the length of the messages or completion",
        example: r#"{"error":{"message":"Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        source: "https://github.com/OpenHands/OpenHands/issues/1902; https://github.com/letta-ai/letta/issues/1963",
    },
    OverflowPattern {
        provider: "ollama",
        regex: r"prompt too long; exceeded (?:max )?context length",
        example: r#"{"StatusCode":400,"Status":"400 Bad Request","error":"prompt too long; exceeded max context length by 4 tokens"}"#,
        source: "test fixtures reproducing Ollama's server error, e.g. openclaw's sanitizeUserFacingText tests (find_string: 'prompt too long; exceeded max context length')",
    },
    OverflowPattern {
        provider: "ollama",
        regex: r"input length exceeds the context length|prompt is longer than the context length",
        example: r#"{"error":"the input length exceeds the context length"}"#,
        source: "https://github.com/ollama/ollama/issues/17889 and the truncate:false notes quoting Ollama 0.32 (400 with the llama.cpp body, or 'the prompt is longer than the context length currently available to the model')",
    },
    OverflowPattern {
        provider: "generic",
        regex: r"context[_ ]length[_ ]exceeded|exceed_context_size_error",
        example: r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#,
        source: "OpenAI and Groq error code; llama.cpp error type (see rows above)",
    },
];

/// Real error bodies for each provider shape, with their HTTP status, for
/// tests (the fake server replays them).
pub const OVERFLOW_SAMPLES: &[(&str, u16, &str)] = &[
    ("anthropic", 400, OVERFLOW_PATTERNS[0].example),
    ("anthropic-max-tokens", 400, OVERFLOW_PATTERNS[1].example),
    ("openai", 400, OVERFLOW_PATTERNS[2].example),
    ("openai-responses", 400, OVERFLOW_PATTERNS[3].example),
    ("deepseek", 400, OVERFLOW_PATTERNS[4].example),
    ("vllm", 400, OVERFLOW_PATTERNS[5].example),
    ("vllm-prompt", 400, OVERFLOW_PATTERNS[6].example),
    ("openai-legacy", 400, OVERFLOW_PATTERNS[7].example),
    ("openrouter", 400, OVERFLOW_PATTERNS[8].example),
    ("google", 400, OVERFLOW_PATTERNS[9].example),
    ("xai", 400, OVERFLOW_PATTERNS[10].example),
    ("llama.cpp", 400, OVERFLOW_PATTERNS[11].example),
    ("mistral", 400, OVERFLOW_PATTERNS[12].example),
    ("cerebras", 400, OVERFLOW_PATTERNS[13].example),
    ("groq", 400, OVERFLOW_PATTERNS[14].example),
    ("ollama", 400, OVERFLOW_PATTERNS[15].example),
    ("ollama-embed", 500, OVERFLOW_PATTERNS[16].example),
    (
        "http-413",
        413,
        r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
    ),
    ("cerebras-no-body", 400, ""),
];

/// Markers of rate limits, which some providers word with "tokens" and
/// send with 413 (Groq's tokens-per-minute limit): never an overflow.
const RATE_LIMIT_MARKERS: &[&str] = &[
    "rate_limit_exceeded",
    "tokens per minute",
    "rate limit",
    "throttl",
];

/// A recognised overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    /// The provider whose wording matched (`http-413`, `empty-400` for the
    /// status-only rules).
    pub provider: &'static str,
    /// The prompt size the error states, when it states one.
    pub stated_prompt: Option<u64>,
    /// The context window the error states, when it states one.
    pub stated_limit: Option<u64>,
}

fn compiled() -> &'static [Regex] {
    static COMPILED: OnceLock<Vec<Regex>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        OVERFLOW_PATTERNS
            .iter()
            .map(|pattern| {
                regex::RegexBuilder::new(pattern.regex)
                    .case_insensitive(true)
                    .dot_matches_new_line(true)
                    .build()
                    .expect("overflow patterns are literals checked by the unit tests")
            })
            .collect()
    })
}

fn number(text: &str) -> Option<u64> {
    text.chars()
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

/// Classifies an error response: returns the overflow when `status` and
/// `body` say the prompt did not fit.
///
/// Rules, in order: bodies that speak of a rate limit are never overflows;
/// any known wording matches (with any non-success status); HTTP 413 is an
/// overflow; a 400 with an empty body is one (Cerebras).
pub fn classify_overflow(status: u16, body: &str) -> Option<Overflow> {
    if (200..300).contains(&status) {
        return None;
    }
    let lower = body.to_ascii_lowercase();
    if RATE_LIMIT_MARKERS
        .iter()
        .any(|marker| lower.contains(marker))
    {
        return None;
    }
    for (pattern, regex) in OVERFLOW_PATTERNS.iter().zip(compiled()) {
        if let Some(caps) = regex.captures(body) {
            let prompt = caps.name("prompt").and_then(|m| number(m.as_str()));
            let extra = caps
                .name("prompt2")
                .and_then(|m| number(m.as_str()))
                .unwrap_or(0);
            return Some(Overflow {
                provider: pattern.provider,
                stated_prompt: prompt.map(|n| n + extra),
                stated_limit: caps.name("limit").and_then(|m| number(m.as_str())),
            });
        }
    }
    if status == 413 {
        return Some(Overflow {
            provider: "http-413",
            stated_prompt: None,
            stated_limit: None,
        });
    }
    if status == 400 && body.trim().is_empty() {
        return Some(Overflow {
            provider: "empty-400",
            stated_prompt: None,
            stated_limit: None,
        });
    }
    None
}

/// Returns whether a successful response reveals a silent overflow: the
/// reported prompt exceeds the context window (SPEC §6.3).
pub fn is_silent_overflow(reported_prompt: u64, context_window: u64) -> bool {
    context_window > 0 && reported_prompt > context_window
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: u16, body: &str, expected: Option<(&str, Option<u64>)>) {
        let got = classify_overflow(status, body).map(|o| (o.provider, o.stated_prompt));
        assert_eq!(got, expected, "body: {body}");
    }

    #[test]
    fn every_pattern_compiles_and_matches_its_example() {
        assert_eq!(compiled().len(), OVERFLOW_PATTERNS.len());
        for (pattern, regex) in OVERFLOW_PATTERNS.iter().zip(compiled()) {
            assert!(
                regex.is_match(pattern.example),
                "{} does not match its example",
                pattern.provider
            );
            assert!(!pattern.source.is_empty());
        }
    }

    #[test]
    fn stated_sizes_are_extracted() {
        check(
            400,
            OVERFLOW_PATTERNS[0].example,
            Some(("anthropic", Some(208_656))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[1].example,
            Some(("anthropic", Some(174_167))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[2].example,
            Some(("openai", Some(204_308))),
        );
        check(400, OVERFLOW_PATTERNS[3].example, Some(("openai", None)));
        check(
            400,
            OVERFLOW_PATTERNS[4].example,
            Some(("deepseek", Some(123_137))),
        );
        check(400, OVERFLOW_PATTERNS[5].example, Some(("vllm", Some(8))));
        check(
            400,
            OVERFLOW_PATTERNS[6].example,
            Some(("vllm", Some(25_938))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[7].example,
            Some(("openai-legacy", Some(8_977))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[8].example,
            Some(("openrouter", Some(70_875))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[9].example,
            Some(("google", Some(1_200_293))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[10].example,
            Some(("xai", Some(136_973))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[11].example,
            Some(("llama.cpp", Some(13_392))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[12].example,
            Some(("mistral", Some(240_000))),
        );
        check(
            400,
            OVERFLOW_PATTERNS[13].example,
            Some(("cerebras", Some(42_328))),
        );
        check(400, OVERFLOW_PATTERNS[14].example, Some(("groq", None)));
        check(400, OVERFLOW_PATTERNS[15].example, Some(("ollama", None)));
        check(500, OVERFLOW_PATTERNS[16].example, Some(("ollama", None)));
    }

    #[test]
    fn functions_part_counts_as_prompt() {
        let body = "This model's maximum context length is 8192 tokens. However, you requested 8213 tokens (6683 in the messages, 730 in the functions, and 800 in the completion).";
        check(400, body, Some(("deepseek", Some(7_413))));
    }

    #[test]
    fn comma_grouped_numbers() {
        let body = "prompt is too long: 1,130,567 tokens > 1,000,000 maximum";
        let overflow = classify_overflow(400, body).unwrap();
        assert_eq!(overflow.stated_prompt, Some(1_130_567));
        assert_eq!(overflow.stated_limit, Some(1_000_000));
    }

    #[test]
    fn status_rules() {
        check(413, "Request Entity Too Large", Some(("http-413", None)));
        check(400, "", Some(("empty-400", None)));
        check(
            400,
            r#"{"error":{"code":"context_length_exceeded"}}"#,
            Some(("generic", None)),
        );
    }

    #[test]
    fn ordinary_errors_are_not_overflow() {
        check(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#,
            None,
        );
        check(
            400,
            r#"{"error":{"message":"Invalid 'max_tokens': integer below minimum value.","code":"integer_below_min_value"}}"#,
            None,
        );
        check(
            401,
            r#"{"error":{"message":"Incorrect API key provided"}}"#,
            None,
        );
        check(
            429,
            r#"{"error":{"message":"Rate limit reached for gpt-5 on tokens per min (TPM)"}}"#,
            None,
        );
        check(
            413,
            r#"{"error":{"message":"Request too large for model `llama-3.3-70b-versatile` on tokens per minute (TPM): Limit 6000, Requested 14810","type":"tokens","code":"rate_limit_exceeded"}}"#,
            None,
        );
        check(200, OVERFLOW_PATTERNS[0].example, None);
        check(500, "internal server error", None);
        // Too many output tokens is a bad request, not a context overflow.
        check(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-opus-4-1-20250805"}}"#,
            None,
        );
    }

    #[test]
    fn silent_overflow() {
        assert!(is_silent_overflow(200_001, 200_000));
        assert!(!is_silent_overflow(200_000, 200_000));
        assert!(!is_silent_overflow(5, 0));
    }

    #[test]
    fn samples_all_classify() {
        for (name, status, body) in OVERFLOW_SAMPLES {
            assert!(classify_overflow(*status, body).is_some(), "sample {name}");
        }
    }
}
