//! One-time pairing codes: eight characters without look-alikes (no 0/O, 1/I/L).

const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";

/// A fresh code from the operating system's CSPRNG.
pub fn new_code() -> String {
    metnos_kit::random::from_alphabet(ALPHABET, 8)
}

/// A webhook secret token: 32 characters of `[A-Za-z0-9]` (what Telegram accepts).
pub fn new_secret() -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    metnos_kit::random::from_alphabet(CHARS, 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_eight_unambiguous_characters_and_differ() {
        let a = new_code();
        let b = new_code();
        assert_eq!(a.len(), 8);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)));
        assert_ne!(a, b);
    }
}
