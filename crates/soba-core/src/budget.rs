//! The token budget (SPEC §4.3): every limit derived from a model's context
//! window, its `maxOutputTokens` and the compaction configuration, in exact
//! integer arithmetic, with the configuration errors and the warning.

use std::fmt;

use crate::config::{CompactionConfig, Ratio};
use crate::tokens::{TokenCount, group_thousands};

/// `keepRecentTokens` below this is a configuration error.
pub const MIN_KEEP_RECENT_TOKENS: u64 = 256;
/// `maxWorkingSetTokens` below this is a configuration error.
pub const MIN_WORKING_SET_TOKENS: u64 = 1_000;
/// The default `maxToolResultTokens` is at most this.
pub const DEFAULT_MAX_TOOL_RESULT_TOKENS: u64 = 16_000;
/// The retained tail is at most this share of autoLimit (0.8).
const KEEP_RECENT_SHARE: Ratio = Ratio::from_ppm(800_000);

/// Every limit of SPEC §4.3 for one model and configuration. Built only by
/// [`Budget::compute`], so its figures always satisfy the spec's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    context_window: TokenCount,
    max_output_tokens: TokenCount,
    safety_reserve_tokens: TokenCount,
    hard_limit: TokenCount,
    soft_limit: TokenCount,
    auto_limit: TokenCount,
    base: TokenCount,
    hygiene_limit: TokenCount,
    keep_recent: TokenCount,
    keep_recent_results: usize,
    soft_gate: TokenCount,
    roi_floor: TokenCount,
    max_tool_result_tokens: TokenCount,
    /// `floor(hardLimit × autoCompactThresholdRatio)`, named by the warning.
    threshold_tokens: TokenCount,
    min_tokens_for_auto_compact: TokenCount,
    min_savings_ratio: Ratio,
}

/// A budget that cannot work (SPEC §4.3): exit 1, naming the numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// `contextWindow − maxOutputTokens − safetyReserveTokens ≤ 0`. Lower
    /// `safetyReserveTokens` or `maxOutputTokens`, or pick a larger model.
    #[error("hardLimit {} ≤ 0 ({})", signed(*hard_limit), hard_limit_cause(*context_window, *max_output_tokens))]
    HardLimit {
        /// The computed, non-positive hard limit.
        hard_limit: i128,
        /// The model's context window.
        context_window: TokenCount,
        /// The `max_tokens` sent with every request.
        max_output_tokens: TokenCount,
        /// `compaction.safetyReserveTokens`.
        safety_reserve_tokens: TokenCount,
    },
    /// A ratio key lies outside (0, 1]. Fix the configuration.
    #[error("compaction.{key} {value} is outside (0, 1]")]
    RatioOutOfRange {
        /// The key, e.g. `hygieneRatio`.
        key: &'static str,
        /// The value configured.
        value: Ratio,
    },
    /// `keepRecentTokens` is below 256. Raise it.
    #[error("compaction.keepRecentTokens {} < 256; raise it to at least 256", group_thousands(keep_recent_tokens.get()))]
    KeepRecentTooSmall {
        /// The value configured.
        keep_recent_tokens: TokenCount,
    },
    /// `maxWorkingSetTokens` is below 1,000. Raise it, or set it to null.
    #[error(
        "compaction.maxWorkingSetTokens {} < 1,000; raise it or set it to null",
        group_thousands(max_working_set_tokens.get())
    )]
    WorkingSetTooSmall {
        /// The value configured.
        max_working_set_tokens: TokenCount,
    },
    /// `min(autoLimit − 1, floor(base × hygieneRatio)) ≤ 0`: the window is
    /// too small to compact in. Raise `hygieneRatio` or pick a larger model.
    #[error(
        "hygieneLimit {} ≤ 0 (autoLimit {}, base {}, hygieneRatio {}): this model's window is too small to compact",
        signed(*hygiene_limit),
        group_thousands(auto_limit.get()),
        group_thousands(base.get()),
        hygiene_ratio
    )]
    HygieneLimit {
        /// The computed, non-positive hygiene limit.
        hygiene_limit: i128,
        /// The auto limit it was derived from.
        auto_limit: TokenCount,
        /// The base it was derived from.
        base: TokenCount,
        /// `compaction.hygieneRatio`.
        hygiene_ratio: Ratio,
    },
}

/// Formats a signed number with thousands separators and a true minus sign
/// (`−2,048`), as SPEC §4.3 writes it.
fn signed(n: i128) -> String {
    let magnitude = group_thousands(u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX));
    if n < 0 {
        format!("\u{2212}{magnitude}")
    } else {
        magnitude
    }
}

fn hard_limit_cause(context_window: TokenCount, max_output_tokens: TokenCount) -> String {
    if max_output_tokens >= context_window {
        format!(
            "maxOutputTokens {} leaves no room in contextWindow {}",
            group_thousands(max_output_tokens.get()),
            group_thousands(context_window.get())
        )
    } else {
        "safetyReserveTokens too large for this model".to_owned()
    }
}

/// A budget that works but deserves a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BudgetWarning {
    /// softLimit = hardLimit − 1: soft compaction can only fire one token
    /// below the hard limit.
    SoftAtHardLimit {
        /// `floor(hardLimit × autoCompactThresholdRatio)`.
        threshold_tokens: TokenCount,
        /// The hard limit.
        hard_limit: TokenCount,
    },
}

impl fmt::Display for BudgetWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetWarning::SoftAtHardLimit {
                threshold_tokens,
                hard_limit,
            } if threshold_tokens.get() < hard_limit.get().saturating_sub(1) => {
                write!(
                    f,
                    "soft compaction fires only one token below the hard limit for this model; \
                     set compaction.minTokensForAutoCompact below {threshold_tokens} to compact earlier"
                )
            }
            // The ratio alone reaches the hard limit (a ratio of 1, or a
            // tiny window): lowering minTokensForAutoCompact cannot help.
            BudgetWarning::SoftAtHardLimit { .. } => write!(
                f,
                "soft compaction fires only one token below the hard limit for this model; \
                 set compaction.autoCompactThresholdRatio below 1 to compact earlier"
            ),
        }
    }
}

impl Budget {
    /// Computes every limit of SPEC §4.3 from the model's context window, the
    /// `max_tokens` sent with every request, and the configuration.
    ///
    /// Errors, in this order: a ratio outside (0, 1]; `keepRecentTokens` <
    /// 256; `maxWorkingSetTokens` < 1,000; hardLimit ≤ 0; hygieneLimit ≤ 0.
    pub fn compute(
        context_window: TokenCount,
        max_output_tokens: TokenCount,
        config: &CompactionConfig,
    ) -> Result<Budget, BudgetError> {
        for (key, value) in [
            (
                "autoCompactThresholdRatio",
                config.auto_compact_threshold_ratio,
            ),
            ("hygieneRatio", config.hygiene_ratio),
            ("minSavingsRatio", config.min_savings_ratio),
        ] {
            if !value.is_in_unit_interval() {
                return Err(BudgetError::RatioOutOfRange { key, value });
            }
        }
        if config.keep_recent_tokens.get() < MIN_KEEP_RECENT_TOKENS {
            return Err(BudgetError::KeepRecentTooSmall {
                keep_recent_tokens: config.keep_recent_tokens,
            });
        }
        if let Some(working_set) = config.max_working_set_tokens
            && working_set.get() < MIN_WORKING_SET_TOKENS
        {
            return Err(BudgetError::WorkingSetTooSmall {
                max_working_set_tokens: working_set,
            });
        }

        let hard = i128::from(context_window.get())
            - i128::from(max_output_tokens.get())
            - i128::from(config.safety_reserve_tokens.get());
        let hard_limit = match u64::try_from(hard) {
            Ok(hard) if hard > 0 => hard,
            _ => {
                return Err(BudgetError::HardLimit {
                    hard_limit: hard,
                    context_window,
                    max_output_tokens,
                    safety_reserve_tokens: config.safety_reserve_tokens,
                });
            }
        };

        let ratio = config.auto_compact_threshold_ratio;
        let threshold = ratio.mul_floor(hard_limit);
        let soft_limit =
            (hard_limit - 1).min(config.min_tokens_for_auto_compact.get().max(threshold));
        let auto_limit = match config.max_working_set_tokens {
            Some(working_set) => soft_limit.min(working_set.get()),
            None => soft_limit,
        };
        let base = match config
            .max_working_set_tokens
            .and_then(|working_set| ratio.div_floor(working_set.get()))
        {
            Some(scaled) => hard_limit.min(scaled),
            None => hard_limit,
        };
        let hygiene =
            (i128::from(auto_limit) - 1).min(i128::from(config.hygiene_ratio.mul_floor(base)));
        let hygiene_limit = match u64::try_from(hygiene) {
            Ok(hygiene) if hygiene > 0 => hygiene,
            _ => {
                return Err(BudgetError::HygieneLimit {
                    hygiene_limit: hygiene,
                    auto_limit: TokenCount::new(auto_limit),
                    base: TokenCount::new(base),
                    hygiene_ratio: config.hygiene_ratio,
                });
            }
        };
        let keeping_share = config
            .min_savings_ratio
            .complement()
            .unwrap_or(Ratio::from_ppm(0));
        let keep_recent = config
            .keep_recent_tokens
            .get()
            .min(KEEP_RECENT_SHARE.mul_floor(auto_limit))
            .min(keeping_share.mul_floor(auto_limit));
        let soft_gate = config.min_tokens_for_auto_compact.get().min(auto_limit);
        let roi_floor = config
            .min_reclaimable_tokens
            .get()
            .min(config.min_savings_ratio.mul_floor(auto_limit));
        let max_tool_result_tokens = config.max_tool_result_tokens.map_or_else(
            || DEFAULT_MAX_TOOL_RESULT_TOKENS.min(hard_limit / 4),
            TokenCount::get,
        );

        Ok(Budget {
            context_window,
            max_output_tokens,
            safety_reserve_tokens: config.safety_reserve_tokens,
            hard_limit: TokenCount::new(hard_limit),
            soft_limit: TokenCount::new(soft_limit),
            auto_limit: TokenCount::new(auto_limit),
            base: TokenCount::new(base),
            hygiene_limit: TokenCount::new(hygiene_limit),
            keep_recent: TokenCount::new(keep_recent),
            keep_recent_results: config.keep_recent_results,
            soft_gate: TokenCount::new(soft_gate),
            roi_floor: TokenCount::new(roi_floor),
            max_tool_result_tokens: TokenCount::new(max_tool_result_tokens),
            threshold_tokens: TokenCount::new(threshold),
            min_tokens_for_auto_compact: config.min_tokens_for_auto_compact,
            min_savings_ratio: config.min_savings_ratio,
        })
    }

    /// Returns the model's context window.
    pub fn context_window(&self) -> TokenCount {
        self.context_window
    }

    /// Returns `maxOutputTokens`, the `max_tokens` of every request.
    pub fn max_output_tokens(&self) -> TokenCount {
        self.max_output_tokens
    }

    /// Returns `safetyReserveTokens` as configured.
    pub fn safety_reserve_tokens(&self) -> TokenCount {
        self.safety_reserve_tokens
    }

    /// Returns hardLimit: effective tokens above it force a compaction, and
    /// a request known to be above it is never sent.
    pub fn hard_limit(&self) -> TokenCount {
        self.hard_limit
    }

    /// Returns softLimit, the capability threshold before the working-set cap.
    pub fn soft_limit(&self) -> TokenCount {
        self.soft_limit
    }

    /// Returns autoLimit, where `auto_threshold` fires.
    pub fn auto_limit(&self) -> TokenCount {
        self.auto_limit
    }

    /// Returns base, the size hygiene is measured against.
    pub fn base(&self) -> TokenCount {
        self.base
    }

    /// Returns hygieneLimit, where hygiene is considered.
    pub fn hygiene_limit(&self) -> TokenCount {
        self.hygiene_limit
    }

    /// Returns keepRecent, the verbatim tail's budget.
    pub fn keep_recent(&self) -> TokenCount {
        self.keep_recent
    }

    /// Returns `keepRecentResults`: the tail may stop before keepRecent
    /// once it holds this many tool results (0: by tokens alone).
    pub fn keep_recent_results(&self) -> usize {
        self.keep_recent_results
    }

    /// Returns softGate: every soft trigger needs effective ≥ softGate.
    pub fn soft_gate(&self) -> TokenCount {
        self.soft_gate
    }

    /// Returns roiFloor, the least a soft compaction must reclaim.
    pub fn roi_floor(&self) -> TokenCount {
        self.roi_floor
    }

    /// Returns the tool-output cap of the model input (SPEC §5 step 7).
    pub fn max_tool_result_tokens(&self) -> TokenCount {
        self.max_tool_result_tokens
    }

    /// Returns `minSavingsRatio` as configured.
    pub fn min_savings_ratio(&self) -> Ratio {
        self.min_savings_ratio
    }

    /// Returns whether a soft compaction that frees `reclaimable` tokens of
    /// `effective` meets both ROI gates of SPEC §8.3: `reclaimable ≥
    /// roiFloor` and `reclaimable / effective ≥ minSavingsRatio`, exactly.
    /// The same test serves before generation (reclaimable estimated) and
    /// after it (reclaimed measured against tokensBefore).
    pub fn meets_roi(&self, reclaimable: i64, effective: TokenCount) -> bool {
        i128::from(reclaimable) >= i128::from(self.roi_floor.get())
            && self
                .min_savings_ratio
                .is_reached_by(reclaimable, effective.get())
    }

    /// Returns the warnings for this budget: softLimit = hardLimit − 1
    /// (with the defaults, whenever hardLimit ≤ 32,001).
    pub fn warnings(&self) -> Vec<BudgetWarning> {
        let mut warnings = Vec::new();
        if self.soft_limit.get() + 1 == self.hard_limit.get() {
            warnings.push(BudgetWarning::SoftAtHardLimit {
                threshold_tokens: self.threshold_tokens,
                hard_limit: self.hard_limit,
            });
        }
        warnings
    }

    /// Returns `minTokensForAutoCompact` as configured (the uncapped soft gate).
    pub fn min_tokens_for_auto_compact(&self) -> TokenCount {
        self.min_tokens_for_auto_compact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[hard, soft, auto, base, hygiene, keepRecent, softGate, roiFloor, maxToolResult]`.
    fn check(context_window: u64, max_output: u64, expected: [u64; 9]) {
        let budget = Budget::compute(
            TokenCount::new(context_window),
            TokenCount::new(max_output),
            &CompactionConfig::default(),
        )
        .unwrap();
        let got = figures(&budget);
        assert_eq!(
            got, expected,
            "window {context_window}, max output {max_output}"
        );
    }

    fn check_error(
        context_window: u64,
        max_output: u64,
        config: &CompactionConfig,
        expected: &str,
    ) {
        let err = Budget::compute(
            TokenCount::new(context_window),
            TokenCount::new(max_output),
            config,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), expected);
    }

    #[test]
    fn worked_examples_of_section_4_3() {
        check(
            65_000,
            8_000,
            [
                48_808, 39_046, 39_046, 48_808, 24_404, 20_000, 32_000, 9_761, 12_202,
            ],
        );
        check(
            200_000,
            32_000,
            [
                159_808, 127_846, 80_000, 100_000, 50_000, 20_000, 32_000, 12_000, 16_000,
            ],
        );
        check(
            1_000_000,
            64_000,
            [
                927_808, 742_246, 80_000, 100_000, 50_000, 20_000, 32_000, 12_000, 16_000,
            ],
        );
        check(
            32_768,
            8_192,
            [
                16_384, 16_383, 16_383, 16_384, 8_192, 12_287, 16_383, 4_095, 4_096,
            ],
        );
        check_error(
            8_192,
            2_048,
            &CompactionConfig::default(),
            "hardLimit \u{2212}2,048 ≤ 0 (safetyReserveTokens too large for this model)",
        );
    }

    /// The figures of `check` under [`CompactionConfig::for_window`].
    fn small(context_window: u64, max_output: u64, config: &CompactionConfig) -> Budget {
        let (window, max_output) = (TokenCount::new(context_window), TokenCount::new(max_output));
        Budget::compute(window, max_output, &config.for_window(window, max_output)).unwrap()
    }

    fn figures(budget: &Budget) -> [u64; 9] {
        [
            budget.hard_limit(),
            budget.soft_limit(),
            budget.auto_limit(),
            budget.base(),
            budget.hygiene_limit(),
            budget.keep_recent(),
            budget.soft_gate(),
            budget.roi_floor(),
            budget.max_tool_result_tokens(),
        ]
        .map(TokenCount::get)
    }

    #[test]
    fn small_windows_get_proportional_defaults() {
        let defaults = CompactionConfig::default();
        // 8,192 × 8,192 / 64,000 = 1,048 reserved: hardLimit 5,096; the
        // soft floor 4,096 (32,000 × 0.128) is autoLimit; the tail a quarter
        // of it; the ROI floor min(1,536, 1,024).
        let budget = small(8_192, 2_048, &defaults);
        assert_eq!(
            figures(&budget),
            [
                5_096, 4_096, 4_096, 5_096, 2_548, 1_024, 4_096, 1_024, 1_274
            ]
        );
        assert_eq!(budget.warnings(), [], "no warning at every start");
        // The spec's 32,768 example kept 12,287 of 16,383; now 4,096.
        let budget = small(32_768, 8_192, &defaults);
        assert_eq!(
            figures(&budget),
            [
                20_382, 16_384, 16_384, 20_382, 10_191, 4_096, 16_384, 4_096, 5_095
            ]
        );
        assert_eq!(budget.warnings(), []);
        // From 64,000 tokens on, nothing changes.
        assert_eq!(
            figures(&small(65_000, 8_000, &defaults)),
            [
                48_808, 39_046, 39_046, 48_808, 24_404, 20_000, 32_000, 9_761, 12_202,
            ]
        );
        assert_eq!(
            defaults.for_window(TokenCount::new(64_000), TokenCount::new(8_000)),
            defaults
        );
    }

    #[test]
    fn keys_someone_set_are_not_scaled() {
        let mut config = CompactionConfig::default();
        config
            .set_key("retentionBudgetTokens", &serde_json::json!(20_000))
            .unwrap();
        config
            .set_key("safetyReserveTokens", &serde_json::json!(8_192))
            .unwrap();
        let scaled = config.for_window(TokenCount::new(32_768), TokenCount::new(4_096));
        assert_eq!(scaled.keep_recent_tokens.get(), 20_000);
        assert_eq!(scaled.safety_reserve_tokens.get(), 8_192);
        assert_eq!(scaled.min_tokens_for_auto_compact.get(), 16_384);
        // A value changed in code is not a default either.
        let embedded = CompactionConfig {
            keep_recent_tokens: TokenCount::new(1_000),
            ..CompactionConfig::default()
        };
        let scaled = embedded.for_window(TokenCount::new(8_192), TokenCount::new(2_048));
        assert_eq!(scaled.keep_recent_tokens.get(), 1_000);
        assert_eq!(scaled.summarizer.max_output_tokens.get(), 512);
        assert_eq!(scaled.user_message_budget_tokens.get(), 512);
    }

    #[test]
    fn hard_limit_error_names_max_output_when_it_fills_the_window() {
        check_error(
            8_192,
            9_000,
            &CompactionConfig::default(),
            "hardLimit \u{2212}9,000 ≤ 0 (maxOutputTokens 9,000 leaves no room in contextWindow 8,192)",
        );
    }

    #[test]
    fn warning_when_soft_is_one_below_hard() {
        let small = Budget::compute(
            TokenCount::new(32_768),
            TokenCount::new(8_192),
            &CompactionConfig::default(),
        )
        .unwrap();
        assert_eq!(
            small
                .warnings()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                "soft compaction fires only one token below the hard limit for this model; \
              set compaction.minTokensForAutoCompact below 13,107 to compact earlier"
            ]
        );
        let large = Budget::compute(
            TokenCount::new(200_000),
            TokenCount::new(32_000),
            &CompactionConfig::default(),
        )
        .unwrap();
        assert!(large.warnings().is_empty());
    }

    #[test]
    fn exact_ratios() {
        let mut config = CompactionConfig {
            max_working_set_tokens: None,
            ..CompactionConfig::default()
        };
        config.auto_compact_threshold_ratio = Ratio::parse_decimal("0.7").unwrap();
        config.min_tokens_for_auto_compact = TokenCount::new(0);
        // hardLimit 90,000: floor(90000 × 0.7) = 63,000, not f64's 62,999.
        let budget =
            Budget::compute(TokenCount::new(106_192), TokenCount::new(8_000), &config).unwrap();
        assert_eq!(budget.hard_limit().get(), 90_000);
        assert_eq!(budget.soft_limit().get(), 63_000);
        // base = floor(80000 / 0.8) = 100,000.
        let budget = Budget::compute(
            TokenCount::new(1_000_000),
            TokenCount::new(64_000),
            &CompactionConfig::default(),
        )
        .unwrap();
        assert_eq!(budget.base().get(), 100_000);
    }

    #[test]
    fn configuration_errors_name_the_numbers() {
        let window = 200_000;
        let out = 32_000;
        let config = CompactionConfig {
            hygiene_ratio: Ratio::from_ppm(1_500_000),
            ..CompactionConfig::default()
        };
        check_error(
            window,
            out,
            &config,
            "compaction.hygieneRatio 1.5 is outside (0, 1]",
        );
        let config = CompactionConfig {
            min_savings_ratio: Ratio::from_ppm(0),
            ..CompactionConfig::default()
        };
        check_error(
            window,
            out,
            &config,
            "compaction.minSavingsRatio 0 is outside (0, 1]",
        );
        let config = CompactionConfig {
            keep_recent_tokens: TokenCount::new(255),
            ..CompactionConfig::default()
        };
        check_error(
            window,
            out,
            &config,
            "compaction.keepRecentTokens 255 < 256; raise it to at least 256",
        );
        let config = CompactionConfig {
            max_working_set_tokens: Some(TokenCount::new(999)),
            ..CompactionConfig::default()
        };
        check_error(
            window,
            out,
            &config,
            "compaction.maxWorkingSetTokens 999 < 1,000; raise it or set it to null",
        );
        // hardLimit 2: softLimit 1, autoLimit 1, hygieneLimit min(0, 1) = 0.
        check_error(
            8_194 + 100,
            100,
            &CompactionConfig::default(),
            "hygieneLimit 0 ≤ 0 (autoLimit 1, base 2, hygieneRatio 0.5): this model's window is too small to compact",
        );
    }

    #[test]
    fn boundaries_of_the_configuration_rules() {
        let window = TokenCount::new(200_000);
        let out = TokenCount::new(32_000);
        let config = CompactionConfig {
            keep_recent_tokens: TokenCount::new(256),
            max_working_set_tokens: Some(TokenCount::new(1_000)),
            hygiene_ratio: Ratio::ONE,
            ..CompactionConfig::default()
        };
        let budget = Budget::compute(window, out, &config).unwrap();
        assert_eq!(budget.auto_limit().get(), 1_000);
        // base = min(159,808, floor(1000 / 0.8)) = 1,250; hygiene = min(999, 1,250).
        assert_eq!(budget.base().get(), 1_250);
        assert_eq!(budget.hygiene_limit().get(), 999);
        assert_eq!(budget.keep_recent().get(), 256);
        assert_eq!(budget.soft_gate().get(), 1_000);
        assert_eq!(budget.roi_floor().get(), 250);
    }

    #[test]
    fn explicit_tool_result_cap_wins() {
        let config = CompactionConfig {
            max_tool_result_tokens: Some(TokenCount::new(3_000)),
            ..CompactionConfig::default()
        };
        let budget =
            Budget::compute(TokenCount::new(200_000), TokenCount::new(32_000), &config).unwrap();
        assert_eq!(budget.max_tool_result_tokens().get(), 3_000);
    }

    #[test]
    fn roi_gates_are_exact() {
        let budget = Budget::compute(
            TokenCount::new(200_000),
            TokenCount::new(32_000),
            &CompactionConfig::default(),
        )
        .unwrap();
        // roiFloor 12,000, minSavingsRatio 0.25.
        assert!(budget.meets_roi(20_000, TokenCount::new(80_000)));
        assert!(!budget.meets_roi(19_999, TokenCount::new(80_000)));
        assert!(!budget.meets_roi(11_999, TokenCount::new(40_000)));
        assert!(budget.meets_roi(12_000, TokenCount::new(48_000)));
        assert!(!budget.meets_roi(-5, TokenCount::new(0)));
    }
}
