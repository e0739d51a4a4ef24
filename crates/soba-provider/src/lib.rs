//! SOBA's network side: HTTP clients for Anthropic Messages, OpenAI Chat
//! Completions and OpenAI Responses, SSE, usage normalisation, overflow
//! classification, the model registry and the LLM summarizer.
#![warn(missing_docs)]
