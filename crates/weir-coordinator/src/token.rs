//! The job's secret token: every HTTP request must carry it as
//! `Authorization: Bearer <token>`.

use std::fmt;

use subtle::ConstantTimeEq;

use crate::error::{DriverError, Result};

/// A job's secret token. Its `Debug` output hides the secret.
#[derive(Clone)]
pub struct JobToken(String);

impl JobToken {
    /// Wraps `token`; refuses an empty one.
    pub fn new(token: impl Into<String>) -> Result<Self> {
        let token = token.into();
        if token.is_empty() {
            return Err(DriverError::EmptyToken);
        }
        Ok(Self(token))
    }

    /// Whether an `Authorization` header value carries this token. The token
    /// bytes are compared in constant time, so response timing does not reveal
    /// how much of a guess was right.
    pub fn authorizes(&self, header: Option<&[u8]>) -> bool {
        let Some(header) = header else {
            return false;
        };
        let Some((scheme, presented)) = header.split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(presented.ct_eq(self.0.as_bytes()))
    }

    /// The header value a client sends.
    pub fn bearer_header(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl fmt::Debug for JobToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobToken(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_authorizes() {
        let t = JobToken::new("s3cret").expect("non-empty");
        assert!(t.authorizes(Some(b"Bearer s3cret")));
        assert!(t.authorizes(Some(b"bearer s3cret")));
        assert!(t.authorizes(Some(t.bearer_header().as_bytes())));
        for bad in [
            &b"Bearer s3cre"[..],
            b"Bearer s3cret2",
            b"Basic s3cret",
            b"s3cret",
            b"",
            b"Bearer ",
        ] {
            assert!(
                !t.authorizes(Some(bad)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(!t.authorizes(None));
    }

    #[test]
    fn empty_tokens_are_refused_and_secrets_stay_out_of_logs() {
        assert!(matches!(JobToken::new(""), Err(DriverError::EmptyToken)));
        let t = JobToken::new("s3cret").expect("non-empty");
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
