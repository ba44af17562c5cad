//! Identifiers and secrets from the operating system's CSPRNG: turn ids, approval tokens,
//! scratchpad ids, pairing codes, webhook secrets. One place, no modulo bias, and never a
//! silent fallback to something guessable.

/// Fills `buffer` from the operating system's CSPRNG.
///
/// # Panics
/// When the operating system gives no randomness (a broken kernel or sandbox): nothing
/// that needs an unguessable value can go on safely.
pub fn fill(buffer: &mut [u8]) {
    if let Err(e) = getrandom::fill(buffer) {
        panic!("the operating system gave no randomness: {e}");
    }
}

/// `bytes` random bytes as lower-case hex (twice as many digits).
pub fn hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    fill(&mut buffer);
    hex::encode(buffer)
}

/// `len` characters drawn uniformly from `alphabet` (at most 256 symbols): bytes that would
/// favour the first symbols are drawn again.
pub fn from_alphabet(alphabet: &[u8], len: usize) -> String {
    assert!(
        !alphabet.is_empty() && alphabet.len() <= 256,
        "an alphabet has 1 to 256 symbols"
    );
    // The largest multiple of the alphabet's size that fits in a byte's 256 values.
    let zone = 256 - 256 % alphabet.len();
    let mut out = String::with_capacity(len);
    let mut buffer = [0u8; 64];
    while out.len() < len {
        fill(&mut buffer);
        for &b in &buffer {
            if usize::from(b) < zone && out.len() < len {
                out.push(char::from(alphabet[usize::from(b) % alphabet.len()]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_have_the_asked_length_and_differ() {
        let a = hex(16);
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(a, hex(16));
    }

    #[test]
    fn alphabet_draws_are_uniform_enough_to_show_no_modulo_bias() {
        // 31 symbols: with `byte % 31` the first 8 would come up 9/8 as often.
        let alphabet = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
        let text = from_alphabet(alphabet, 310_000);
        assert_eq!(text.len(), 310_000);
        let mut counts = [0u32; 31];
        for b in text.bytes() {
            counts[alphabet.iter().position(|&a| a == b).unwrap()] += 1;
        }
        let first: u32 = counts[..8].iter().sum();
        let rest: u32 = counts[8..].iter().sum();
        // Uniform: 8/31 of the draws. Biased: 8*9/(8*9+23*8) = 28.1 %. 25.8 % ± 0.5 %.
        let share = f64::from(first) / f64::from(first + rest);
        assert!(
            (share - 8.0 / 31.0).abs() < 0.005,
            "first 8 symbols: {share}"
        );
    }
}
