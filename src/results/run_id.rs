//! A run's id: what the history records each run once by.
//!
//! A run makes a random UUID when it starts ([`fresh`]). Results written
//! before runs carried one get an id from their content ([`of_content`]):
//! the same file gives the same id, so recording it twice keeps one. A
//! merge's id comes from its parts' ids ([`of_parts`]): merging the same
//! shards again gives the same run.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher13};

/// A new run's id (a random UUID, version 4).
pub fn fresh() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The id of results that carry none: a UUID (version 8, "custom") made
/// of a 128-bit hash of their bytes.
pub fn of_content(bytes: &[u8]) -> String {
    hashed(&[bytes])
}

/// The id of a run merged from parts with these ids, in any order.
pub fn of_parts<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut pieces: Vec<&[u8]> = vec![b"merged"];
    pieces.extend(ids.iter().map(|id| id.as_bytes()));
    hashed(&pieces)
}

fn hashed(pieces: &[&[u8]]) -> String {
    // A fixed key: the id must be the same on every machine.
    let mut hasher = SipHasher13::new_with_keys(0x6f6f_6d67_6174_6521, 0x7275_6e2d_6964_0001);
    for piece in pieces {
        // Length-prefixed, so that ["ab", "c"] and ["a", "bc"] differ.
        hasher.write_u64(piece.len() as u64);
        hasher.write(piece);
    }
    uuid::Uuid::new_v8(hasher.finish128().as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuids_and_content_ids_are_stable() {
        let a = fresh();
        assert_ne!(a, fresh());
        assert_eq!(
            uuid::Uuid::parse_str(&a).map(|u| u.get_version_num()),
            Ok(4)
        );
        let c = of_content(b"{\"schema\": 3}");
        assert_eq!(c, of_content(b"{\"schema\": 3}"));
        assert_ne!(c, of_content(b"{\"schema\": 4}"));
        assert_eq!(
            uuid::Uuid::parse_str(&c).map(|u| u.get_version_num()),
            Ok(8)
        );
    }

    #[test]
    fn a_merge_id_does_not_depend_on_the_parts_order() {
        assert_eq!(of_parts(["a", "b"]), of_parts(["b", "a"]));
        assert_ne!(of_parts(["a", "b"]), of_parts(["a"]));
        assert_ne!(of_parts(["ab"]), of_parts(["a", "b"]));
    }
}
