//! SOBA's bytes on disk: the append-only JSONL session log (wire records,
//! writer, tolerant and backward readers, lock, rewind), flight records,
//! portable capsule files and importers of foreign transcripts.
#![warn(missing_docs)]
