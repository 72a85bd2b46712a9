//! Turning an error and its causes into the single line users see.

use std::io::Write;

/// Prints `weir: error: <message>: <cause>: ...` as one line on stderr.
pub fn print_error(err: &anyhow::Error) {
    // A failing stderr leaves nothing better to do than exit non-zero.
    let _ = writeln!(std::io::stderr(), "weir: error: {}", one_line(err));
}

/// The error and its cause chain on one line. Library errors often repeat
/// their source in their own message, so a cause already spelled out by the
/// message before it is left out rather than printed twice.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let message = cause.to_string();
        let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.contains(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_join_on_one_line_without_repeats() {
        let io = std::io::Error::other("disk on fire\nreally");
        let err = anyhow::Error::from(io)
            .context("reading chk-3/_metadata: disk on fire really")
            .context("cannot open checkpoint");
        assert_eq!(
            one_line(&err),
            "cannot open checkpoint: reading chk-3/_metadata: disk on fire really"
        );
    }
}
