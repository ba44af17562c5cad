//! Tokens.
//!
//! A token is 128 bits from the operating system's CSPRNG, as 32 lower-case hex digits:
//! `approve:<token>` is 40 bytes, well inside Telegram's 64-byte callback_data.
//! The call hash an approval binds to lives in `metnos_core::call`.

/// Length of a token in hex digits.
pub const TOKEN_LEN: usize = 32;

/// A fresh token.
pub fn new_token() -> String {
    metnos_kit::random::hex(TOKEN_LEN / 2)
}

/// Whether `token` has the shape of a token (it may still be unknown).
pub fn is_well_formed(token: &str) -> bool {
    token.len() == TOKEN_LEN
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_do_not_repeat() {
        let tokens: std::collections::HashSet<String> = (0..10_000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 10_000);
        assert!(tokens.iter().all(|t| is_well_formed(t)));
        assert!(!is_well_formed("ABCDEF0123456789abcdef0123456789"));
        assert!(!is_well_formed("abc"));
        assert!(!is_well_formed("0123456789abcdef0123456789abcdeg"));
    }
}
