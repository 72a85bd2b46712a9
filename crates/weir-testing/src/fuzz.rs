//! Settings shared by the fuzz-style property tests (arbitrary and mutated
//! bytes fed to the readers of files Weir did not necessarily write).

/// How many cases each fuzz property runs: `WEIR_FUZZ_CASES` when set (for
/// a long run), else 1024, which takes well under a second in a release
/// build and suits CI.
pub fn fuzz_cases() -> u32 {
    std::env::var("WEIR_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}
