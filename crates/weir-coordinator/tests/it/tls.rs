//! HTTPS: a coordinator with the job's TLS files serves only TLS clients
//! that trust its certificate.

use std::path::PathBuf;

use weir_coordinator::{DriverError, JobToken, OwnerClaim, Tls, TlsFiles, claim_owner};
use weir_types::{OperatorUid, SubtaskIndex};

use crate::client::{TOKEN, server, start_with};

/// The repository's test certificates (`tests/tls`), trusting `ca`.
pub fn test_tls(ca: &str) -> Tls {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/tls");
    Tls::load(TlsFiles {
        ca: dir.join(ca),
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
        server_name: None,
    })
    .expect("test certificates load")
}

fn claim() -> OwnerClaim {
    OwnerClaim {
        generation: 1,
        uid: OperatorUid::new("avg").expect("valid"),
        subtask: SubtaskIndex(0),
        address: "10.0.0.1:7000".into(),
    }
}

#[tokio::test]
async fn https_serves_only_clients_that_trust_the_job_certificate() {
    let tls = test_tls("ca.pem");
    let mut options = server();
    options.tls = Some(tls.clone());
    let job = start_with(|_| {}, options).await;
    let url = job.driver.address().to_owned();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let token = JobToken::new(TOKEN).expect("token");

    let answer = claim_owner(&url, &token, Some(&tls), &claim())
        .await
        .expect("a TLS client with the job's CA is served");
    assert!(answer.granted);

    let plain = url.replacen("https://", "http://", 1);
    let refused = claim_owner(&plain, &token, None, &claim()).await;
    assert!(
        matches!(refused, Err(DriverError::Unreachable { .. })),
        "plain HTTP gets no answer: {refused:?}"
    );
    let untrusted = claim_owner(&url, &token, Some(&test_tls("other-ca.pem")), &claim()).await;
    assert!(
        matches!(&untrusted, Err(DriverError::Unreachable { reason, .. }) if reason.contains("TLS")),
        "a server the client's CA did not issue is refused: {untrusted:?}"
    );
    let without = claim_owner(&url, &token, None, &claim())
        .await
        .expect_err("https needs TLS files");
    assert!(without.to_string().contains("TLS files"), "{without}");
    let wrong = JobToken::new("wrong").expect("token");
    let unauthorized = claim_owner(&url, &wrong, Some(&tls), &claim()).await;
    assert!(
        matches!(unauthorized, Err(DriverError::Refused { status: 401, .. })),
        "over TLS, the token is still checked first: {unauthorized:?}"
    );
    assert_eq!(
        job.driver.owners().len(),
        1,
        "only the authorized claim is recorded"
    );
    job.driver.shutdown(false).await.expect("shuts down");
}
