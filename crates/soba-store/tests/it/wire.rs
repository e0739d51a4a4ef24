//! Records round-trip: every entry, header and flight record survives the
//! wire format unchanged.

use proptest::prelude::*;
use soba_store::wire::{decode_entry, encode_entry};

use crate::strategy;

proptest! {

    #[test]
    fn entries_round_trip(entry in strategy::entry()) {
        let line = encode_entry(&entry).expect("encodes");
        prop_assert!(!line.contains('\n'), "one entry is one line");
        let decoded = decode_entry(&line).expect("decodes");
        prop_assert_eq!(decoded.entry, entry);
        prop_assert!(decoded.issues.is_empty(), "{:?}", decoded.issues);
    }

    #[test]
    fn decoding_arbitrary_text_never_panics(text in "\\PC{0,64}") {
        let _ = decode_entry(&text);
        let _ = soba_store::wire::decode_header(&text);
    }

    #[test]
    fn decoding_mutated_lines_never_panics(entry in strategy::entry(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = encode_entry(&entry).expect("encodes").into_bytes();
        let idx = cut.index(bytes.len());
        bytes[idx] = byte;
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = decode_entry(text);
        }
        let _ = soba_store::SessionLog::from_bytes(&bytes);
    }
}
