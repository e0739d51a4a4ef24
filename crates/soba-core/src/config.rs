//! The `compaction.*` configuration (SPEC §14.3) with its defaults, and
//! [`Ratio`], the exact decimal every ratio key is held in.
//!
//! There is no serde here: the CLI's loader reads JSON and maps each key
//! through [`CompactionConfig::set_key`] (or a whole object through
//! [`CompactionConfig::apply_object`]), which check types only. The numeric
//! rules of SPEC §4.3 are checked by [`crate::budget::Budget::compute`], so
//! they name the numbers of the model they fail for.

use std::fmt;

use serde_json::{Map, Value};

use crate::tokens::TokenCount;

/// Parts per million in one.
const PPM_ONE: u64 = 1_000_000;
/// Decimal digits a [`Ratio`] keeps after the point.
const RATIO_DECIMALS: i64 = 6;

/// A non-negative exact decimal with six digits after the point, held in
/// parts per million, so that `floor(90000 × 0.7)` is 63,000 (SPEC §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ratio(u64);

/// Why a text is not a [`Ratio`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RatioError {
    /// The text is not a decimal number (`0.8`, `.25`, `8e-1`). Fix the value.
    #[error("{0:?} is not a decimal number; write a ratio such as 0.8")]
    Invalid(String),
    /// The number is below zero. Fix the value.
    #[error("{0} is negative; ratios are in (0, 1]")]
    Negative(String),
    /// The number has a non-zero digit beyond the sixth decimal place.
    #[error("{0} has more than 6 decimal places; round it to 6")]
    TooPrecise(String),
    /// The number does not fit in 64-bit parts per million.
    #[error("{0} is too large; ratios are in (0, 1]")]
    TooLarge(String),
}

impl Ratio {
    /// The ratio 1.
    pub const ONE: Ratio = Ratio(PPM_ONE);

    /// Builds a ratio from parts per million (`from_ppm(700_000)` is 0.7).
    pub const fn from_ppm(ppm: u64) -> Self {
        Ratio(ppm)
    }

    /// Returns the ratio in parts per million.
    pub const fn ppm(self) -> u64 {
        self.0
    }

    /// Parses a decimal written as in JSON, without going through `f64`:
    /// an optional `+`, digits with an optional fraction, an optional
    /// exponent (`0.7`, `.25`, `1`, `8e-1`, `75E-2`).
    ///
    /// Surrounding whitespace is ignored. Digits beyond the sixth decimal
    /// place must be zeros.
    pub fn parse_decimal(text: &str) -> Result<Ratio, RatioError> {
        let trimmed = text.trim();
        let invalid = || RatioError::Invalid(trimmed.to_owned());
        let unsigned = match trimmed.as_bytes().first() {
            Some(b'-') => {
                let rest = &trimmed[1..];
                // "-0" and "-0.0" are zero, not negative.
                return match Ratio::parse_decimal(rest) {
                    Ok(Ratio(0)) => Ok(Ratio(0)),
                    Ok(_) | Err(RatioError::TooPrecise(_) | RatioError::TooLarge(_)) => {
                        Err(RatioError::Negative(trimmed.to_owned()))
                    }
                    Err(_) => Err(invalid()),
                };
            }
            Some(b'+') => &trimmed[1..],
            _ => trimmed,
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(at) => {
                let exp_text = &unsigned[at + 1..];
                let digits = exp_text.strip_prefix(['+', '-']).unwrap_or(exp_text);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid());
                }
                // An exponent this long is far outside any ratio; cap it so
                // the arithmetic below cannot overflow.
                let magnitude: i64 = if digits.len() > 6 {
                    1_000_000
                } else {
                    digits.parse().map_err(|_| invalid())?
                };
                let exponent = if exp_text.starts_with('-') {
                    -magnitude
                } else {
                    magnitude
                };
                (&unsigned[..at], exponent)
            }
            None => (unsigned, 0),
        };
        let (int_part, frac_part) = match mantissa.split_once('.') {
            Some((int_part, frac_part)) => (int_part, frac_part),
            None => (mantissa, ""),
        };
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int_part.is_empty() && frac_part.is_empty())
            || !all_digits(int_part)
            || !all_digits(frac_part)
        {
            return Err(invalid());
        }
        // value = digits × 10^(exponent − len(frac)); in ppm, × 10^6 more.
        let mut digits: String = int_part.chars().chain(frac_part.chars()).collect();
        let mut scale = RATIO_DECIMALS + exponent - frac_part.len() as i64;
        let significant_start = digits.find(|c| c != '0').unwrap_or(digits.len());
        digits.drain(..significant_start);
        if digits.is_empty() {
            return Ok(Ratio(0));
        }
        while scale < 0 && digits.ends_with('0') {
            digits.pop();
            scale += 1;
        }
        if scale < 0 {
            return Err(RatioError::TooPrecise(trimmed.to_owned()));
        }
        let too_large = || RatioError::TooLarge(trimmed.to_owned());
        let base: u64 = digits.parse().map_err(|_| too_large())?;
        let scale = u32::try_from(scale).map_err(|_| too_large())?;
        let factor = 10u64.checked_pow(scale).ok_or_else(too_large)?;
        base.checked_mul(factor).map(Ratio).ok_or_else(too_large)
    }

    /// Returns whether the ratio lies in (0, 1], the range every ratio key
    /// must be in.
    pub fn is_in_unit_interval(self) -> bool {
        self.0 > 0 && self.0 <= PPM_ONE
    }

    /// Returns `floor(n × self)`, exactly.
    pub fn mul_floor(self, n: u64) -> u64 {
        let product = u128::from(n) * u128::from(self.0) / u128::from(PPM_ONE);
        u64::try_from(product).unwrap_or(u64::MAX)
    }

    /// Returns `ceil(n × self)`, exactly, saturating.
    pub fn mul_ceil(self, n: u64) -> u64 {
        let product = (u128::from(n) * u128::from(self.0)).div_ceil(u128::from(PPM_ONE));
        u64::try_from(product).unwrap_or(u64::MAX)
    }

    /// Returns `floor(n / self)`, exactly, or `None` for the zero ratio.
    pub fn div_floor(self, n: u64) -> Option<u64> {
        if self.0 == 0 {
            return None;
        }
        let quotient = u128::from(n) * u128::from(PPM_ONE) / u128::from(self.0);
        Some(u64::try_from(quotient).unwrap_or(u64::MAX))
    }

    /// Returns `1 − self`, or `None` when the ratio is above one.
    pub fn complement(self) -> Option<Ratio> {
        PPM_ONE.checked_sub(self.0).map(Ratio)
    }

    /// Returns whether `numerator / denominator ≥ self`, exactly; a zero
    /// denominator compares as if the quotient were infinite.
    pub fn is_reached_by(self, numerator: i64, denominator: u64) -> bool {
        i128::from(numerator) * i128::from(PPM_ONE) >= i128::from(self.0) * i128::from(denominator)
    }
}

impl fmt::Display for Ratio {
    /// Writes the shortest exact decimal: `0.8`, `0.25`, `1`, `0.000001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / PPM_ONE;
        let frac = self.0 % PPM_ONE;
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{frac:06}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// `compaction.native` (SPEC §10.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NativeMode {
    /// Never call `/responses/compact` (the default).
    #[default]
    Off,
    /// Call it in parallel with the summarizer on Responses models.
    Auto,
}

impl NativeMode {
    /// Returns the config value (`off`, `auto`).
    pub fn as_str(self) -> &'static str {
        match self {
            NativeMode::Off => "off",
            NativeMode::Auto => "auto",
        }
    }

    /// Parses a config value.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "off" => Some(NativeMode::Off),
            "auto" => Some(NativeMode::Auto),
            _ => None,
        }
    }
}

/// `compaction.summarizer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummarizerConfig {
    /// The summarizer model; `None` means the registry's cheap model.
    pub model: Option<String>,
    /// The output budget of one summarizer call (default 2,000).
    pub max_output_tokens: TokenCount,
    /// The most summarizer calls (chunks) one compaction makes (default
    /// 8): a longer span has its newest part summarized and its older
    /// part carried by the local sections.
    pub max_chunks: usize,
}

impl Default for SummarizerConfig {
    fn default() -> Self {
        SummarizerConfig {
            model: None,
            max_output_tokens: TokenCount::new(2_000),
            max_chunks: crate::summarize::MAX_CHUNKS,
        }
    }
}

/// `compaction.rehydrate`: the files brought back after a capsule
/// ([`crate::rehydrate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RehydrateConfig {
    /// `maxFiles` (5): files shown with their content; 0 turns rehydration
    /// off.
    pub max_files: usize,
    /// `maxTokensPerFile` (5,000): a longer file is cut on line boundaries.
    pub max_tokens_per_file: TokenCount,
    /// `maxTokens` (25,000): all files together.
    pub max_tokens: TokenCount,
}

impl Default for RehydrateConfig {
    fn default() -> Self {
        RehydrateConfig {
            max_files: 5,
            max_tokens_per_file: TokenCount::new(5_000),
            max_tokens: TokenCount::new(25_000),
        }
    }
}

impl RehydrateConfig {
    /// Returns whether any file is brought back.
    pub fn is_enabled(&self) -> bool {
        self.max_files > 0 && self.max_tokens > TokenCount::ZERO
    }

    /// Returns the budget for a session whose autoLimit is `auto_limit`:
    /// the files never take more than a third of it, so on a small window
    /// they leave room for the capsule and the retained tail.
    pub fn within(&self, auto_limit: TokenCount) -> Self {
        let cap = TokenCount::new(auto_limit.get() / 3);
        RehydrateConfig {
            max_files: self.max_files,
            max_tokens_per_file: self.max_tokens_per_file.min(cap),
            max_tokens: self.max_tokens.min(cap),
        }
    }
}

/// `compaction.keepRecentResults` by default: 25, tuned on half of the
/// shared traces so that SOBA keeps as many tool results 6–20 back as the
/// cheapest peer (ARCHITECTURE.md, "The capsule's working state").
pub const DEFAULT_KEEP_RECENT_RESULTS: usize = 25;

/// Every `compaction.*` key of SPEC §14.3; [`Default`] gives the spec's
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionConfig {
    /// `auto`: soft triggers enabled (`/auto-compact` toggles it).
    pub auto: bool,
    /// `compactOnTurnComplete`: a completed turn leaves an intent.
    pub compact_on_turn_complete: bool,
    /// `compactOnMilestone`: checkpoint entries leave an intent.
    pub compact_on_milestone: bool,
    /// `compactOnReadCost` (true): above softGate, compact when carrying
    /// the reclaimable tokens costs more in cache reads than compacting.
    pub compact_on_read_cost: bool,
    /// `minTokensForAutoCompact` (32,000): the soft floor.
    pub min_tokens_for_auto_compact: TokenCount,
    /// `minReclaimableTokens` (12,000): the ROI floor before capping.
    pub min_reclaimable_tokens: TokenCount,
    /// `minSavingsRatio` (0.25).
    pub min_savings_ratio: Ratio,
    /// `keepRecentTokens` (20,000; alias `retentionBudgetTokens`).
    pub keep_recent_tokens: TokenCount,
    /// `keepRecentResults` (25): the retention walk stops before
    /// keepRecentTokens once the tail holds this many tool results; 0 keeps
    /// by tokens alone.
    pub keep_recent_results: usize,
    /// `cacheTtlSeconds` (300): the provider's prompt-cache lifetime. After
    /// an idle gap longer than this the whole prompt is written again
    /// anyway, so a `cache_expired` compaction costs no extra cache writes;
    /// 0 turns the trigger off.
    pub cache_ttl_seconds: u64,
    /// `safetyReserveTokens` (8,192).
    pub safety_reserve_tokens: TokenCount,
    /// `autoCompactThresholdRatio` (0.8).
    pub auto_compact_threshold_ratio: Ratio,
    /// `timeoutMs` (15,000) per summarizer chunk; alias `backgroundTimeoutMs`.
    pub timeout_ms: u64,
    /// `maxWorkingSetTokens` (80,000); `None` removes the ceiling.
    pub max_working_set_tokens: Option<TokenCount>,
    /// `hygieneRatio` (0.5).
    pub hygiene_ratio: Ratio,
    /// `hygieneKeepMessages` (10).
    pub hygiene_keep_messages: usize,
    /// `minHygieneTokens` (20,000).
    pub min_hygiene_tokens: TokenCount,
    /// `hygieneProtectedTools` (empty).
    pub hygiene_protected_tools: Vec<String>,
    /// `imageTokens` (1,100).
    pub image_tokens: TokenCount,
    /// `userMessageBudgetTokens` (4,000).
    pub user_message_budget_tokens: TokenCount,
    /// `maxToolResultTokens`; `None` means min(16,000, floor(hardLimit / 4)).
    pub max_tool_result_tokens: Option<TokenCount>,
    /// `native` (`off`).
    pub native: NativeMode,
    /// `summarizer`.
    pub summarizer: SummarizerConfig,
    /// `rehydrate`.
    pub rehydrate: RehydrateConfig,
    /// The keys [`CompactionConfig::set_key`] set (canonical names, e.g.
    /// `keepRecentTokens` for its alias): [`CompactionConfig::for_window`]
    /// scales only defaults nobody set.
    pub explicit_keys: std::collections::BTreeSet<String>,
}

/// Picks one token field of a configuration.
type TokenField = fn(&mut CompactionConfig) -> &mut TokenCount;

/// The token keys [`CompactionConfig::for_window`] scales by the window,
/// with their floors (`keepRecentTokens`, derived from the others, apart).
const SCALED_FIELDS: [(&str, TokenField, u64); 6] = [
    ("safetyReserveTokens", |c| &mut c.safety_reserve_tokens, 0),
    (
        "minTokensForAutoCompact",
        |c| &mut c.min_tokens_for_auto_compact,
        0,
    ),
    ("minReclaimableTokens", |c| &mut c.min_reclaimable_tokens, 0),
    ("minHygieneTokens", |c| &mut c.min_hygiene_tokens, 0),
    (
        "userMessageBudgetTokens",
        |c| &mut c.user_message_budget_tokens,
        256,
    ),
    // Room for the deterministic narrative a rejected summary falls back
    // to (its "In progress" alone is up to 300 tokens).
    (
        "summarizer.maxOutputTokens",
        |c| &mut c.summarizer.max_output_tokens,
        512,
    ),
];

/// A `compaction.*` key whose value [`CompactionConfig::for_window`]
/// changes for a model's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaledKey {
    /// The key under `compaction` (`summarizer.*` dotted).
    pub key: &'static str,
    /// The value configured (the default, since only defaults scale).
    pub configured: TokenCount,
    /// The value in force for the window.
    pub in_force: TokenCount,
}

/// Windows below this many tokens are small: the token defaults that
/// [`CompactionConfig::for_window`] scales shrink in proportion.
pub const SMALL_WINDOW: u64 = 64_000;

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            auto: true,
            compact_on_turn_complete: true,
            compact_on_milestone: true,
            compact_on_read_cost: true,
            min_tokens_for_auto_compact: TokenCount::new(32_000),
            min_reclaimable_tokens: TokenCount::new(12_000),
            min_savings_ratio: Ratio::from_ppm(250_000),
            keep_recent_tokens: TokenCount::new(20_000),
            keep_recent_results: DEFAULT_KEEP_RECENT_RESULTS,
            cache_ttl_seconds: 300,
            safety_reserve_tokens: TokenCount::new(8_192),
            auto_compact_threshold_ratio: Ratio::from_ppm(800_000),
            timeout_ms: 15_000,
            max_working_set_tokens: Some(TokenCount::new(80_000)),
            hygiene_ratio: Ratio::from_ppm(500_000),
            hygiene_keep_messages: 10,
            min_hygiene_tokens: TokenCount::new(20_000),
            hygiene_protected_tools: Vec::new(),
            image_tokens: TokenCount::new(1_100),
            user_message_budget_tokens: TokenCount::new(4_000),
            max_tool_result_tokens: None,
            native: NativeMode::Off,
            summarizer: SummarizerConfig::default(),
            rehydrate: RehydrateConfig::default(),
            explicit_keys: std::collections::BTreeSet::new(),
        }
    }
}

impl CompactionConfig {
    /// Returns the configuration for a model with this window and
    /// `max_tokens`: on a small window (below [`SMALL_WINDOW`]), every token
    /// default sized for large windows and still at its default — not set
    /// by the user ([`CompactionConfig::explicit_keys`]) nor changed in code —
    /// becomes proportional to the window, so an 8k or 32k model compacts
    /// usefully without hand tuning:
    ///
    /// - `safetyReserveTokens`, `minTokensForAutoCompact`,
    ///   `minReclaimableTokens`, `minHygieneTokens`,
    ///   `userMessageBudgetTokens` and `summarizer.maxOutputTokens` scale by
    ///   `contextWindow / 64,000` (the user-message budget no lower than
    ///   256, the summary no lower than 512: room for the deterministic
    ///   narrative a rejected summary falls back to);
    /// - `keepRecentTokens` becomes a quarter of the autoLimit the scaled
    ///   figures give (no lower than 256), so compaction frees most of the
    ///   input instead of keeping three quarters of it.
    ///
    /// Windows of 64,000 tokens and more get the configuration unchanged.
    pub fn for_window(&self, context_window: TokenCount, max_output_tokens: TokenCount) -> Self {
        let window = context_window.get();
        if window >= SMALL_WINDOW {
            return self.clone();
        }
        let defaults = CompactionConfig::default();
        let mut scaled = self.clone();
        let scale = |n: TokenCount, floor: u64| {
            let product = u128::from(n.get()) * u128::from(window) / u128::from(SMALL_WINDOW);
            TokenCount::new(u64::try_from(product).unwrap_or(u64::MAX).max(floor))
        };
        let unset = |key: &str, current: TokenCount, default: TokenCount| {
            current == default && !self.explicit_keys.contains(key)
        };
        let mut default_copy = defaults.clone();
        for (key, field, floor) in SCALED_FIELDS {
            let default = *field(&mut default_copy);
            let current = field(&mut scaled);
            if unset(key, *current, default) {
                *current = scale(default, floor);
            }
        }
        if unset(
            "keepRecentTokens",
            self.keep_recent_tokens,
            defaults.keep_recent_tokens,
        ) {
            let hard = window
                .saturating_sub(max_output_tokens.get())
                .saturating_sub(scaled.safety_reserve_tokens.get());
            let threshold = scaled.auto_compact_threshold_ratio.mul_floor(hard);
            let soft = hard
                .saturating_sub(1)
                .min(scaled.min_tokens_for_auto_compact.get().max(threshold));
            let auto = scaled
                .max_working_set_tokens
                .map_or(soft, |cap| soft.min(cap.get()));
            scaled.keep_recent_tokens = TokenCount::new((auto / 4).max(256));
        }
        scaled
    }

    /// Returns the keys whose value [`CompactionConfig::for_window`] changes
    /// for this window and `max_tokens`, in [`COMPACTION_KEYS`] order: none
    /// on a window of [`SMALL_WINDOW`] tokens or more.
    pub fn scaled_keys(
        &self,
        context_window: TokenCount,
        max_output_tokens: TokenCount,
    ) -> Vec<ScaledKey> {
        let mut configured = self.clone();
        let mut in_force = self.for_window(context_window, max_output_tokens);
        let keep_recent: (&str, TokenField, u64) =
            ("keepRecentTokens", |c| &mut c.keep_recent_tokens, 0);
        let mut keys: Vec<ScaledKey> = SCALED_FIELDS
            .iter()
            .chain([&keep_recent])
            .filter_map(|(key, field, _)| {
                let (configured, in_force) = (*field(&mut configured), *field(&mut in_force));
                (configured != in_force).then_some(ScaledKey {
                    key,
                    configured,
                    in_force,
                })
            })
            .collect();
        keys.sort_by_key(|scaled| {
            COMPACTION_KEYS
                .iter()
                .position(|key| *key == scaled.key)
                .unwrap_or(usize::MAX)
        });
        keys
    }
}

/// The keys [`CompactionConfig::set_key`] accepts, as written under
/// `compaction` (camelCase; `summarizer.*` dotted), aliases excluded.
pub const COMPACTION_KEYS: [&str; 28] = [
    "auto",
    "compactOnTurnComplete",
    "compactOnMilestone",
    "compactOnReadCost",
    "minTokensForAutoCompact",
    "minReclaimableTokens",
    "minSavingsRatio",
    "keepRecentTokens",
    "keepRecentResults",
    "cacheTtlSeconds",
    "safetyReserveTokens",
    "autoCompactThresholdRatio",
    "timeoutMs",
    "maxWorkingSetTokens",
    "hygieneRatio",
    "hygieneKeepMessages",
    "minHygieneTokens",
    "hygieneProtectedTools",
    "imageTokens",
    "userMessageBudgetTokens",
    "maxToolResultTokens",
    "native",
    "summarizer.model",
    "summarizer.maxOutputTokens",
    "summarizer.maxChunks",
    "rehydrate.maxFiles",
    "rehydrate.maxTokensPerFile",
    "rehydrate.maxTokens",
];

/// Why a configuration value cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The key is not a `compaction.*` key. Fix the spelling (see the hint).
    #[error("unknown key compaction.{key}{}", suggestion.as_ref().map(|s| format!("; did you mean compaction.{s}?")).unwrap_or_default())]
    UnknownKey {
        /// The key as given, without `compaction.`.
        key: String,
        /// The closest known key, when one is close.
        suggestion: Option<String>,
    },
    /// The value has the wrong type for the key. Fix the value.
    #[error("compaction.{key} must be {expected}, not {value}")]
    WrongType {
        /// The key.
        key: String,
        /// What the key takes.
        expected: &'static str,
        /// The value given, as JSON text.
        value: String,
    },
    /// A ratio key's value is not an exact decimal. Fix the value.
    #[error("compaction.{key}: {source}")]
    Ratio {
        /// The key.
        key: String,
        /// What is wrong with the number.
        #[source]
        source: RatioError,
    },
}

/// A configuration value that was applied but deserves a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigWarning {
    /// `backgroundTimeoutMs` was used; `timeoutMs` replaces it.
    DeprecatedAlias {
        /// The deprecated key.
        alias: &'static str,
        /// The key to use instead.
        key: &'static str,
        /// Whether the replacement was also set and won.
        overridden: bool,
    },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigWarning::DeprecatedAlias {
                alias,
                key,
                overridden: false,
            } => {
                write!(
                    f,
                    "compaction.{alias} is deprecated; rename it to compaction.{key}"
                )
            }
            ConfigWarning::DeprecatedAlias {
                alias,
                key,
                overridden: true,
            } => {
                write!(
                    f,
                    "compaction.{alias} is deprecated and ignored because compaction.{key} is set; remove it"
                )
            }
        }
    }
}

impl CompactionConfig {
    /// Sets one key (camelCase, as under `compaction`; `summarizer.model`
    /// dotted, or `summarizer` with an object) from a JSON value.
    ///
    /// Accepts the alias `retentionBudgetTokens` for `keepRecentTokens` and
    /// the deprecated `backgroundTimeoutMs` for `timeoutMs` (the caller
    /// warns; [`CompactionConfig::apply_object`] does). Ratios may be JSON
    /// numbers or decimal strings. Only types are checked here; the limits of
    /// SPEC §4.3 are checked by [`crate::budget::Budget::compute`].
    pub fn set_key(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        self.apply_key(key, value)?;
        let canonical = match key {
            "retentionBudgetTokens" => "keepRecentTokens",
            "backgroundTimeoutMs" => "timeoutMs",
            other => other,
        };
        if canonical != "summarizer" && canonical != "rehydrate" {
            self.explicit_keys.insert(canonical.to_owned());
        }
        Ok(())
    }

    fn apply_key(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        match key {
            "auto" => self.auto = as_bool(key, value)?,
            "compactOnTurnComplete" => self.compact_on_turn_complete = as_bool(key, value)?,
            "compactOnMilestone" => self.compact_on_milestone = as_bool(key, value)?,
            "compactOnReadCost" => self.compact_on_read_cost = as_bool(key, value)?,
            "minTokensForAutoCompact" => self.min_tokens_for_auto_compact = as_tokens(key, value)?,
            "minReclaimableTokens" => self.min_reclaimable_tokens = as_tokens(key, value)?,
            "minSavingsRatio" => self.min_savings_ratio = as_ratio(key, value)?,
            "keepRecentTokens" | "retentionBudgetTokens" => {
                self.keep_recent_tokens = as_tokens(key, value)?
            }
            "keepRecentResults" => {
                self.keep_recent_results =
                    usize::try_from(as_u64(key, value)?).unwrap_or(usize::MAX);
            }
            "cacheTtlSeconds" => self.cache_ttl_seconds = as_u64(key, value)?,
            "safetyReserveTokens" => self.safety_reserve_tokens = as_tokens(key, value)?,
            "autoCompactThresholdRatio" => {
                self.auto_compact_threshold_ratio = as_ratio(key, value)?
            }
            "timeoutMs" | "backgroundTimeoutMs" => self.timeout_ms = as_u64(key, value)?,
            "maxWorkingSetTokens" => self.max_working_set_tokens = as_optional_tokens(key, value)?,
            "hygieneRatio" => self.hygiene_ratio = as_ratio(key, value)?,
            "hygieneKeepMessages" => {
                self.hygiene_keep_messages =
                    usize::try_from(as_u64(key, value)?).unwrap_or(usize::MAX);
            }
            "minHygieneTokens" => self.min_hygiene_tokens = as_tokens(key, value)?,
            "hygieneProtectedTools" => self.hygiene_protected_tools = as_string_list(key, value)?,
            "imageTokens" => self.image_tokens = as_tokens(key, value)?,
            "userMessageBudgetTokens" => self.user_message_budget_tokens = as_tokens(key, value)?,
            "maxToolResultTokens" => self.max_tool_result_tokens = as_optional_tokens(key, value)?,
            "native" => {
                self.native = value
                    .as_str()
                    .and_then(NativeMode::parse)
                    .ok_or_else(|| wrong_type(key, "\"off\" or \"auto\"", value))?;
            }
            "summarizer.model" => {
                self.summarizer.model = match value {
                    Value::Null => None,
                    Value::String(model) => Some(model.clone()),
                    other => return Err(wrong_type(key, "a model id or null", other)),
                };
            }
            "summarizer.maxOutputTokens" => {
                self.summarizer.max_output_tokens = as_tokens(key, value)?
            }
            "summarizer.maxChunks" => {
                let n = as_u64(key, value)?;
                if n == 0 {
                    return Err(wrong_type(key, "a positive integer", value));
                }
                self.summarizer.max_chunks = usize::try_from(n).unwrap_or(usize::MAX);
            }
            "summarizer" => {
                let object = value
                    .as_object()
                    .ok_or_else(|| wrong_type(key, "an object", value))?;
                for (sub_key, sub_value) in object {
                    self.set_key(&format!("summarizer.{sub_key}"), sub_value)?;
                }
            }
            "rehydrate.maxFiles" => {
                self.rehydrate.max_files =
                    usize::try_from(as_u64(key, value)?).unwrap_or(usize::MAX);
            }
            "rehydrate.maxTokensPerFile" => {
                self.rehydrate.max_tokens_per_file = as_tokens(key, value)?
            }
            "rehydrate.maxTokens" => self.rehydrate.max_tokens = as_tokens(key, value)?,
            "rehydrate" => {
                let object = value
                    .as_object()
                    .ok_or_else(|| wrong_type(key, "an object", value))?;
                for (sub_key, sub_value) in object {
                    self.set_key(&format!("rehydrate.{sub_key}"), sub_value)?;
                }
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_owned(),
                    suggestion: closest_key(key),
                });
            }
        }
        Ok(())
    }

    /// Applies every key of a `compaction` JSON object, in order, and
    /// returns the warnings (deprecated aliases). When both `timeoutMs` and
    /// `backgroundTimeoutMs` are set, `timeoutMs` wins.
    pub fn apply_object(
        &mut self,
        object: &Map<String, Value>,
    ) -> Result<Vec<ConfigWarning>, ConfigError> {
        let mut warnings = Vec::new();
        let has_timeout = object.contains_key("timeoutMs");
        for (key, value) in object {
            if key == "backgroundTimeoutMs" {
                warnings.push(ConfigWarning::DeprecatedAlias {
                    alias: "backgroundTimeoutMs",
                    key: "timeoutMs",
                    overridden: has_timeout,
                });
                if has_timeout {
                    continue;
                }
            }
            self.set_key(key, value)?;
        }
        Ok(warnings)
    }
}

fn wrong_type(key: &str, expected: &'static str, value: &Value) -> ConfigError {
    ConfigError::WrongType {
        key: key.to_owned(),
        expected,
        value: value.to_string(),
    }
}

fn as_bool(key: &str, value: &Value) -> Result<bool, ConfigError> {
    value
        .as_bool()
        .ok_or_else(|| wrong_type(key, "true or false", value))
}

fn as_u64(key: &str, value: &Value) -> Result<u64, ConfigError> {
    value
        .as_u64()
        .ok_or_else(|| wrong_type(key, "a non-negative integer", value))
}

fn as_tokens(key: &str, value: &Value) -> Result<TokenCount, ConfigError> {
    value
        .as_u64()
        .map(TokenCount::new)
        .ok_or_else(|| wrong_type(key, "a non-negative integer", value))
}

fn as_optional_tokens(key: &str, value: &Value) -> Result<Option<TokenCount>, ConfigError> {
    match value {
        Value::Null => Ok(None),
        other => other
            .as_u64()
            .map(|n| Some(TokenCount::new(n)))
            .ok_or_else(|| wrong_type(key, "a non-negative integer or null", other)),
    }
}

fn as_ratio(key: &str, value: &Value) -> Result<Ratio, ConfigError> {
    // serde_json writes an f64 in its shortest round-trip form, so the
    // decimal a user wrote (`0.7`) comes back as the same text.
    let text = match value {
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        other => return Err(wrong_type(key, "a decimal number", other)),
    };
    Ratio::parse_decimal(&text).map_err(|source| ConfigError::Ratio {
        key: key.to_owned(),
        source,
    })
}

fn as_string_list(key: &str, value: &Value) -> Result<Vec<String>, ConfigError> {
    let items = value
        .as_array()
        .ok_or_else(|| wrong_type(key, "an array of tool names", value))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| wrong_type(key, "an array of tool names", value))
        })
        .collect()
}

/// Returns the known key closest to `key` by edit distance (case-folded),
/// when it is close enough to be a typo or the key is a truncation of it
/// (`keepRecent` for `keepRecentTokens`).
fn closest_key(key: &str) -> Option<String> {
    let wanted = key.to_ascii_lowercase();
    COMPACTION_KEYS
        .iter()
        .filter_map(|known| {
            let known_folded = known.to_ascii_lowercase();
            let distance = edit_distance(&wanted, &known_folded);
            let is_typo = distance <= (known.len() / 3).max(2);
            let is_truncation = wanted.len() >= 4 && known_folded.starts_with(&wanted);
            (is_typo || is_truncation).then_some((distance, *known))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known.to_owned())
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b_chars: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b_chars.len()).collect();
    for (i, a_char) in a.chars().enumerate() {
        let mut current = Vec::with_capacity(b_chars.len() + 1);
        current.push(i + 1);
        for (j, b_char) in b_chars.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != *b_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b_chars.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ppm(text: &str) -> Result<u64, RatioError> {
        Ratio::parse_decimal(text).map(Ratio::ppm)
    }

    #[test]
    fn parses_decimals_exactly() {
        assert_eq!(ppm("0.7"), Ok(700_000));
        assert_eq!(ppm("0.8"), Ok(800_000));
        assert_eq!(ppm(".25"), Ok(250_000));
        assert_eq!(ppm("1"), Ok(1_000_000));
        assert_eq!(ppm("1.0"), Ok(1_000_000));
        assert_eq!(ppm("+0.5"), Ok(500_000));
        assert_eq!(ppm("8e-1"), Ok(800_000));
        assert_eq!(ppm("75E-2"), Ok(750_000));
        assert_eq!(ppm("0.000001"), Ok(1));
        assert_eq!(ppm("0.2500000000"), Ok(250_000));
        assert_eq!(ppm("0"), Ok(0));
        assert_eq!(ppm("-0.0"), Ok(0));
        assert_eq!(ppm("0e999999999"), Ok(0));
        assert_eq!(ppm(" 0.5 "), Ok(500_000));
        assert_eq!(ppm("1.5"), Ok(1_500_000));
    }

    #[test]
    fn rejects_what_is_not_an_exact_ratio() {
        assert_eq!(
            ppm("0.1234567"),
            Err(RatioError::TooPrecise("0.1234567".into()))
        );
        assert_eq!(ppm("1e-7"), Err(RatioError::TooPrecise("1e-7".into())));
        assert_eq!(ppm("-0.5"), Err(RatioError::Negative("-0.5".into())));
        assert_eq!(ppm("1e30"), Err(RatioError::TooLarge("1e30".into())));
        for bad in ["", ".", "abc", "0.5.1", "1e", "e5", "--1", "0x1", "1_0"] {
            assert_eq!(ppm(bad), Err(RatioError::Invalid(bad.into())), "{bad:?}");
        }
        assert_eq!(
            RatioError::TooPrecise("0.1234567".into()).to_string(),
            "0.1234567 has more than 6 decimal places; round it to 6"
        );
    }

    #[test]
    fn ratio_arithmetic_floors_exactly() {
        let seven_tenths = Ratio::from_ppm(700_000);
        assert_eq!(seven_tenths.mul_floor(90_000), 63_000);
        // Plain f64 gives 62,999 here: the reason ratios are integers.
        assert_eq!((90_000f64 * 0.7).floor() as u64, 62_999);
        assert_eq!(Ratio::from_ppm(800_000).div_floor(80_000), Some(100_000));
        assert_eq!(Ratio::from_ppm(0).div_floor(80_000), None);
        assert_eq!(
            Ratio::from_ppm(250_000).complement(),
            Some(Ratio::from_ppm(750_000))
        );
        assert_eq!(Ratio::from_ppm(1_500_000).complement(), None);
        assert!(Ratio::from_ppm(250_000).is_reached_by(25, 100));
        assert!(!Ratio::from_ppm(250_000).is_reached_by(24, 100));
    }

    #[test]
    fn ratio_display_is_the_shortest_decimal() {
        assert_eq!(Ratio::from_ppm(800_000).to_string(), "0.8");
        assert_eq!(Ratio::from_ppm(250_000).to_string(), "0.25");
        assert_eq!(Ratio::ONE.to_string(), "1");
        assert_eq!(Ratio::from_ppm(1).to_string(), "0.000001");
        assert_eq!(Ratio::from_ppm(1_500_000).to_string(), "1.5");
        assert!(Ratio::ONE.is_in_unit_interval());
        assert!(!Ratio::from_ppm(0).is_in_unit_interval());
        assert!(!Ratio::from_ppm(1_000_001).is_in_unit_interval());
    }

    #[test]
    fn defaults_are_the_spec_table() {
        let config = CompactionConfig::default();
        assert!(config.auto && config.compact_on_turn_complete && config.compact_on_milestone);
        assert_eq!(config.min_tokens_for_auto_compact.get(), 32_000);
        assert_eq!(config.min_reclaimable_tokens.get(), 12_000);
        assert_eq!(config.min_savings_ratio.to_string(), "0.25");
        assert_eq!(config.keep_recent_tokens.get(), 20_000);
        assert_eq!(config.safety_reserve_tokens.get(), 8_192);
        assert_eq!(config.auto_compact_threshold_ratio.to_string(), "0.8");
        assert_eq!(config.timeout_ms, 15_000);
        assert_eq!(config.max_working_set_tokens, Some(TokenCount::new(80_000)));
        assert_eq!(config.hygiene_ratio.to_string(), "0.5");
        assert_eq!(config.hygiene_keep_messages, 10);
        assert_eq!(config.min_hygiene_tokens.get(), 20_000);
        assert!(config.hygiene_protected_tools.is_empty());
        assert_eq!(config.image_tokens.get(), 1_100);
        assert_eq!(config.user_message_budget_tokens.get(), 4_000);
        assert_eq!(config.max_tool_result_tokens, None);
        assert_eq!(config.native, NativeMode::Off);
        assert_eq!(
            config.summarizer,
            SummarizerConfig {
                model: None,
                max_output_tokens: TokenCount::new(2_000),
                max_chunks: 8,
            }
        );
    }

    #[test]
    fn set_key_maps_every_type() {
        let mut config = CompactionConfig::default();
        config.set_key("auto", &json!(false)).unwrap();
        config
            .set_key("retentionBudgetTokens", &json!(30_000))
            .unwrap();
        config.set_key("hygieneRatio", &json!(0.7)).unwrap();
        config.set_key("minSavingsRatio", &json!("0.3")).unwrap();
        config.set_key("maxWorkingSetTokens", &json!(null)).unwrap();
        config
            .set_key("maxToolResultTokens", &json!(4_000))
            .unwrap();
        config
            .set_key("hygieneProtectedTools", &json!(["read_file"]))
            .unwrap();
        config.set_key("native", &json!("auto")).unwrap();
        config
            .set_key(
                "summarizer",
                &json!({"model": "openai/gpt-5-mini", "maxOutputTokens": 1_500}),
            )
            .unwrap();
        assert!(!config.auto);
        assert_eq!(config.keep_recent_tokens.get(), 30_000);
        assert_eq!(config.hygiene_ratio.ppm(), 700_000);
        assert_eq!(config.min_savings_ratio.ppm(), 300_000);
        assert_eq!(config.max_working_set_tokens, None);
        assert_eq!(config.max_tool_result_tokens, Some(TokenCount::new(4_000)));
        assert_eq!(config.hygiene_protected_tools, vec!["read_file".to_owned()]);
        assert_eq!(config.native, NativeMode::Auto);
        assert_eq!(
            config.summarizer.model.as_deref(),
            Some("openai/gpt-5-mini")
        );
        assert_eq!(config.summarizer.max_output_tokens.get(), 1_500);
    }

    #[test]
    fn set_key_reports_type_errors_and_typos() {
        let mut config = CompactionConfig::default();
        assert_eq!(
            config
                .set_key("keepRecentTokens", &json!("lots"))
                .unwrap_err()
                .to_string(),
            "compaction.keepRecentTokens must be a non-negative integer, not \"lots\""
        );
        assert_eq!(
            config
                .set_key("keepRecentToken", &json!(1))
                .unwrap_err()
                .to_string(),
            "unknown key compaction.keepRecentToken; did you mean compaction.keepRecentTokens?"
        );
        assert_eq!(
            config
                .set_key("keepRecent", &json!(1))
                .unwrap_err()
                .to_string(),
            "unknown key compaction.keepRecent; did you mean compaction.keepRecentTokens?"
        );
        assert_eq!(
            config.set_key("zzz", &json!(1)).unwrap_err().to_string(),
            "unknown key compaction.zzz"
        );
        assert_eq!(
            config
                .set_key("hygieneRatio", &json!(-0.5))
                .unwrap_err()
                .to_string(),
            "compaction.hygieneRatio: -0.5 is negative; ratios are in (0, 1]"
        );
        assert_eq!(config, CompactionConfig::default());
    }

    #[test]
    fn apply_object_prefers_timeout_ms_over_its_alias() {
        let mut config = CompactionConfig::default();
        let object = json!({"backgroundTimeoutMs": 9_000, "timeoutMs": 5_000});
        let warnings = config.apply_object(object.as_object().unwrap()).unwrap();
        assert_eq!(config.timeout_ms, 5_000);
        assert_eq!(
            warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "compaction.backgroundTimeoutMs is deprecated and ignored because compaction.timeoutMs is set; remove it"
            ]
        );
        let mut config = CompactionConfig::default();
        let object = json!({"backgroundTimeoutMs": 9_000});
        let warnings = config.apply_object(object.as_object().unwrap()).unwrap();
        assert_eq!(config.timeout_ms, 9_000);
        assert_eq!(warnings.len(), 1);
    }
}
