//! SOBA's network side: HTTP clients for Anthropic Messages, OpenAI Chat
//! Completions and OpenAI Responses, SSE, usage normalisation, overflow
//! classification, the model registry and the LLM summarizer.
//!
//! Without the `http` feature the crate still offers the request and
//! response model, the [`ModelClient`] trait, the wire encoders and stream
//! decoders of the three dialects, overflow classification and the model
//! registry, so an embedder can bring its own HTTP client. The `http`
//! feature adds the clients ([`transport`]); `fake-server` adds a loopback
//! provider for tests (the `fake` module, feature `fake-server`).
#![warn(missing_docs)]

pub mod anthropic;
pub mod catalog;
pub mod client;
pub mod error;
pub mod openai_chat;
pub mod openai_responses;
pub mod overflow;
pub mod registry;
pub mod request;
pub mod sse;
pub mod summarizer;
pub mod wire;

#[cfg(feature = "http")]
pub mod probe;
#[cfg(feature = "http")]
pub mod transport;

#[cfg(feature = "fake-server")]
pub mod fake;

pub use client::{Api, BoxFuture, Cancellation, ModelClient, NeverCancel};
pub use error::ProviderError;
pub use overflow::{Overflow, classify_overflow, is_silent_overflow};
pub use registry::{ModelInfo, ModelOverride, ModelRegistry, RegistryError};
pub use request::{
    ChatRequest, ChatResponse, NativeCompaction, ReasoningConfig, StopReason, StreamEvent,
    ToolSchema,
};
