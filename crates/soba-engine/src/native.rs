//! Native continuation (SPEC §10.3, §5 step 2): with `compaction.native:
//! "auto"` on a model served through OpenAI Responses, the barrier also
//! calls `POST /responses/compact` on the span, in parallel with the
//! summarizer and under the same deadline, and stores the returned
//! `compaction` item on the capsule as its `native`. Later requests carry
//! that item instead of the rendered capsule only when provider, model and
//! endpoint fingerprint match the session's [`NativeTarget`].
//!
//! The portable capsule is always built and appended: a native failure is
//! logged and changes nothing else. The native input is the span only —
//! the previous capsule (its own native item when it matches, else its
//! rendered message), the span's messages as the model sees them now
//! (hygiene stubs, tool-output caps and the orphan sweep applied) and the
//! elided middle of a cut straddler — never the retained tail.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use soba_core::capsule::{BoundaryTruncation, NativeContinuation};
use soba_core::input::{ModelInput, NativeMatch};
use soba_core::{Block, Entry, EntryBody, EntryId, Message};
use soba_provider::client::BoxFuture;
use soba_provider::error::ProviderError;
use soba_provider::request::NativeCompaction;
use tokio_util::sync::CancellationToken;

/// Where the session's requests go: a native item is sent only to the
/// provider, model and endpoint it was made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeTarget {
    /// The provider name (the config's `providers` key, e.g. `openai`).
    pub provider: String,
    /// The model name sent on the wire (e.g. `gpt-5-codex`).
    pub model: String,
    /// The endpoint fingerprint (`Endpoint::fingerprint`, SPEC §10.3).
    pub endpoint_fingerprint: String,
}

impl NativeTarget {
    /// Returns whether `native` was made for this target and holds a usable
    /// item (a `compaction` with its `encrypted_content`).
    pub fn matches(&self, native: &NativeContinuation) -> bool {
        native.provider == self.provider
            && native.model == self.model
            && native.endpoint_fingerprint == self.endpoint_fingerprint
            && parse_item(&native.item).is_some()
    }

    /// Returns the model-input predicate of SPEC §5 step 2 for this target.
    pub fn native_match(&self) -> NativeMatch {
        let target = self.clone();
        Arc::new(move |native: &NativeContinuation| target.matches(native))
    }

    /// Returns the capsule's `native` record for an item made here.
    pub fn continuation(&self, item: &NativeCompaction) -> NativeContinuation {
        NativeContinuation {
            provider: self.provider.clone(),
            model: self.model.clone(),
            endpoint_fingerprint: self.endpoint_fingerprint.clone(),
            item: item.to_input_item().to_string(),
        }
    }
}

/// Parses a stored item (JSON text) back into what a request carries;
/// `None` unless it is a `compaction` item with a non-empty
/// `encrypted_content`.
pub fn parse_item(item: &str) -> Option<NativeCompaction> {
    let value: Value = serde_json::from_str(item).ok()?;
    if value.get("type").and_then(Value::as_str) != Some("compaction") {
        return None;
    }
    let encrypted = value.get("encrypted_content").and_then(Value::as_str)?;
    (!encrypted.is_empty()).then(|| NativeCompaction {
        encrypted_content: encrypted.to_owned(),
    })
}

/// Something that compacts a span natively: the OpenAI Responses client
/// ([`ResponsesCompactor`]), or a test double.
pub trait NativeCompactor: Send + Sync {
    /// Returns where the items it makes may be sent.
    fn target(&self) -> &NativeTarget;

    /// Compacts `span` (after `previous`, the previous native item) and
    /// returns only the `compaction` item. Dropping the future abandons
    /// the request.
    fn compact<'a>(
        &'a self,
        instructions: &'a str,
        span: &'a [Message],
        previous: Option<&'a NativeCompaction>,
    ) -> BoxFuture<'a, Result<NativeCompaction, ProviderError>>;
}

/// The OpenAI Responses client as a [`NativeCompactor`].
#[cfg(feature = "http")]
#[derive(Debug, Clone)]
pub struct ResponsesCompactor {
    client: soba_provider::transport::OpenAiResponsesClient,
    target: NativeTarget,
}

#[cfg(feature = "http")]
impl ResponsesCompactor {
    /// Returns a compactor for `model` (its wire name) of `provider` on the
    /// client's endpoint.
    pub fn new(
        client: soba_provider::transport::OpenAiResponsesClient,
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        let target = NativeTarget {
            provider: provider.into(),
            model: model.into(),
            endpoint_fingerprint: client.endpoint().fingerprint(),
        };
        ResponsesCompactor { client, target }
    }

    /// Returns the compactor a session uses (SPEC §10.3): one only with
    /// `compaction.native: "auto"` and a model served through OpenAI
    /// Responses; `None` otherwise.
    pub fn for_session(
        mode: soba_core::config::NativeMode,
        api: soba_provider::client::Api,
        provider: &str,
        model: &str,
        endpoint: soba_provider::client::Endpoint,
        config: soba_provider::transport::HttpConfig,
    ) -> Result<Option<Arc<dyn NativeCompactor>>, ProviderError> {
        if mode != soba_core::config::NativeMode::Auto
            || api != soba_provider::client::Api::OpenAiResponses
        {
            return Ok(None);
        }
        let client = soba_provider::transport::OpenAiResponsesClient::new(endpoint, config)?;
        Ok(Some(Arc::new(ResponsesCompactor::new(
            client, provider, model,
        ))))
    }
}

#[cfg(feature = "http")]
impl NativeCompactor for ResponsesCompactor {
    fn target(&self) -> &NativeTarget {
        &self.target
    }

    fn compact<'a>(
        &'a self,
        instructions: &'a str,
        span: &'a [Message],
        previous: Option<&'a NativeCompaction>,
    ) -> BoxFuture<'a, Result<NativeCompaction, ProviderError>> {
        Box::pin(async move {
            let outcome = self
                .client
                .compact(
                    &self.target.model,
                    instructions,
                    span,
                    previous,
                    &soba_provider::client::NeverCancel,
                )
                .await?;
            Ok(outcome.item)
        })
    }
}

/// Why a native compaction produced no item. None of these changes the
/// barrier's outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NativeError {
    /// The provider failed; the portable capsule is used alone. A later
    /// compaction tries again.
    #[error("native compaction failed: {0}")]
    Provider(#[source] ProviderError),
    /// No item before the barrier's deadline; the request was abandoned.
    #[error("native compaction timed out after {after_ms} ms")]
    Timeout {
        /// The deadline that passed.
        after_ms: u64,
    },
    /// The turn was cancelled; nothing is appended anyway.
    #[error("native compaction cancelled")]
    Cancelled,
    /// The span holds no message and there is no previous capsule: there
    /// is nothing to send.
    #[error("native compaction skipped: the span holds no message")]
    EmptySpan,
}

/// One native compaction, prepared under the session lock.
pub struct NativeJob {
    compactor: Arc<dyn NativeCompactor>,
    instructions: String,
    span: Vec<Message>,
    previous: Option<NativeCompaction>,
}

impl std::fmt::Debug for NativeJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeJob")
            .field("target", self.compactor.target())
            .field("span", &self.span.len())
            .field("previous", &self.previous.is_some())
            .finish_non_exhaustive()
    }
}

impl NativeJob {
    /// Prepares the native input of a plan (SPEC §10.3): the previous
    /// capsule — its native item when the view sends it, else its rendered
    /// message — then the view's messages whose entry is in the span, then
    /// the elided middle of the cut straddler. The system parts of the view
    /// are the instructions. The retained tail is never included.
    pub fn prepare(
        compactor: Arc<dyn NativeCompactor>,
        view: &ModelInput<'_>,
        path: &[Entry],
        span_entry_ids: &[EntryId],
        truncation: Option<&BoundaryTruncation>,
    ) -> Self {
        let instructions = view
            .system
            .iter()
            .map(|part| part.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
        let mut span = Vec::new();
        let mut previous = None;
        if let Some(capsule) = &view.capsule {
            match capsule.rendered {
                Some(rendered) => span.push(rendered.clone()),
                None => {
                    previous = capsule
                        .capsule
                        .native
                        .as_ref()
                        .and_then(|native| parse_item(&native.item));
                }
            }
        }
        let straddler = truncation.map(|cut| &cut.entry_id);
        let in_span: HashSet<&EntryId> = span_entry_ids
            .iter()
            .filter(|id| Some(*id) != straddler)
            .collect();
        span.extend(
            view.messages
                .iter()
                .filter(|message| in_span.contains(message.source))
                .map(|message| message.message.clone()),
        );
        if let Some(cut) = truncation.filter(|cut| span_entry_ids.contains(&cut.entry_id))
            && let Some(middle) = straddler_middle(path, cut)
        {
            span.push(middle);
        }
        NativeJob {
            compactor,
            instructions,
            span,
            previous,
        }
    }

    /// Returns the messages sent (after the previous item, if any).
    pub fn span(&self) -> &[Message] {
        &self.span
    }

    /// Runs the compaction under `deadline`, abandoning the request on
    /// cancel, and returns the capsule's `native` record.
    pub async fn run(
        &self,
        deadline: Duration,
        cancel: &CancellationToken,
    ) -> Result<NativeContinuation, NativeError> {
        if self.span.is_empty() && self.previous.is_none() {
            return Err(NativeError::EmptySpan);
        }
        let call = self
            .compactor
            .compact(&self.instructions, &self.span, self.previous.as_ref());
        let item = tokio::select! {
            _ = cancel.cancelled() => return Err(NativeError::Cancelled),
            result = tokio::time::timeout(deadline, call) => match result {
                Err(_elapsed) => {
                    return Err(NativeError::Timeout {
                        after_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
                    });
                }
                Ok(Err(ProviderError::Cancelled)) => return Err(NativeError::Cancelled),
                Ok(Err(err)) => return Err(NativeError::Provider(err)),
                Ok(Ok(item)) => item,
            },
        };
        Ok(self.compactor.target().continuation(&item))
    }
}

/// Returns the straddler's elided middle as a message of its role: the
/// characters between the kept head and the kept tail of its text.
fn straddler_middle(path: &[Entry], cut: &BoundaryTruncation) -> Option<Message> {
    let entry = path.iter().find(|entry| entry.id == cut.entry_id)?;
    let EntryBody::Message(message_entry) = &entry.body else {
        return None;
    };
    let message = &message_entry.message;
    let text = message.text();
    let head = usize::try_from(cut.head_chars).ok()?;
    let omitted = usize::try_from(cut.omitted_chars).ok()?;
    let middle: String = text.chars().skip(head).take(omitted).collect();
    if middle.trim().is_empty() {
        return None;
    }
    let mut out = Message::new(message.role, vec![Block::Text(middle)]);
    out.origin = message.origin;
    out.model = message.model.clone();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> NativeTarget {
        NativeTarget {
            provider: "openai".into(),
            model: "gpt-5-codex".into(),
            endpoint_fingerprint: "f1".into(),
        }
    }

    #[test]
    fn items_round_trip_and_only_compaction_items_parse() {
        let item = NativeCompaction {
            encrypted_content: "gAAAA-1".into(),
        };
        let native = target().continuation(&item);
        assert_eq!(
            native.item,
            r#"{"type":"compaction","encrypted_content":"gAAAA-1"}"#
        );
        assert_eq!(parse_item(&native.item), Some(item));
        assert_eq!(
            parse_item(r#"{"type":"message","encrypted_content":"x"}"#),
            None
        );
        assert_eq!(
            parse_item(r#"{"type":"compaction","encrypted_content":""}"#),
            None
        );
        assert_eq!(parse_item("not json"), None);
    }

    #[test]
    fn a_match_needs_provider_model_and_endpoint() {
        let item = NativeCompaction {
            encrypted_content: "e".into(),
        };
        let native = target().continuation(&item);
        assert!(target().matches(&native));
        assert!((target().native_match())(&native));
        let mut other = target();
        other.model = "gpt-5".into();
        assert!(!other.matches(&native));
        let mut other = target();
        other.endpoint_fingerprint = "f2".into();
        assert!(!other.matches(&native));
        let mut other = target();
        other.provider = "azure".into();
        assert!(!other.matches(&native));
        let mut broken = native.clone();
        broken.item = "{}".into();
        assert!(!target().matches(&broken));
    }

    #[test]
    fn the_straddler_middle_is_what_the_cut_elides() {
        let entry = Entry {
            id: EntryId::from_uuid(soba_core::IdKind::Entry, 7),
            parent_id: None,
            timestamp: String::new(),
            body: EntryBody::Message(soba_core::MessageEntry {
                message: Message::user("héad-MIDDLE-tail"),
                tokens: None,
            }),
        };
        let cut = BoundaryTruncation {
            entry_id: entry.id.clone(),
            head_chars: 5,
            tail_chars: 5,
            omitted_chars: 6,
            kept_tokens: soba_core::TokenCount::new(3),
        };
        let middle = straddler_middle(std::slice::from_ref(&entry), &cut).unwrap();
        assert_eq!(middle.text(), "MIDDLE");
        assert_eq!(middle.role, soba_core::Role::User);
    }
}
