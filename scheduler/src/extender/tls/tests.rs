use super::*;
use axum::Router;
use axum::routing::get;
use gputopo_testenv::loopback::TlsClient;
use gputopo_testenv::pki::Pki;
use rustls::AlertDescription;
use std::time::Instant;

#[test]
fn plain_http_only_when_asked_and_tls_files_in_pairs() {
    let p = |s: &str| Some(PathBuf::from(s));
    assert_eq!(
        transport(None, None, None, false),
        Err(TransportError::NoTls)
    );
    assert_eq!(transport(None, None, None, true), Ok(None));
    let files = transport(p("c"), p("k"), p("ca"), false)
        .expect("a pair")
        .expect("TLS");
    assert_eq!(
        (files.cert, files.key, files.client_ca),
        (PathBuf::from("c"), PathBuf::from("k"), p("ca"))
    );
    assert_eq!(
        transport(p("c"), None, None, false)
            .expect_err("half")
            .to_string(),
        "--tls-cert-file needs --tls-key-file"
    );
    assert_eq!(
        transport(None, None, p("ca"), false)
            .expect_err("half")
            .to_string(),
        "--client-ca-file needs --tls-cert-file"
    );
    assert_eq!(
        transport(p("c"), p("k"), None, true)
            .expect_err("both")
            .to_string(),
        "--insecure-plain-http and --tls-cert-file exclude each other"
    );
    assert_eq!(
        transport(None, None, p("ca"), true),
        Err(TransportError::Both("client-ca-file"))
    );
    assert!(
        TransportError::NoTls
            .to_string()
            .contains("or --insecure-plain-http, for local testing only")
    );
}

#[test]
fn tls_files_that_cannot_be_used_name_the_flag_and_path() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pki = Pki::create(&dir.path().join("a")).expect("a CA");
    let other = Pki::create(&dir.path().join("b")).expect("another CA");
    let files = |cert: &Path, key: &Path, ca: Option<&Path>| TlsFiles {
        cert: cert.to_owned(),
        key: key.to_owned(),
        client_ca: ca.map(Path::to_owned),
    };
    let serving = &pki.serving;
    let ok = files(&serving.cert, &serving.key, Some(&pki.ca_files.cert))
        .load()
        .expect("a usable pair and CA");
    assert!(ok.client_certificates);
    assert!(
        !files(&serving.cert, &serving.key, None)
            .load()
            .expect("no client CA")
            .client_certificates
    );

    let missing = dir.path().join("missing.crt");
    let e = files(&missing, &serving.key, None)
        .load()
        .expect_err("no file")
        .to_string();
    assert_eq!(
        e,
        format!(
            "--tls-cert-file {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    // A key file holding a certificate, a CA file holding a key.
    let e = files(&serving.cert, &serving.cert, None)
        .load()
        .expect_err("no key")
        .to_string();
    assert_eq!(
        e,
        format!(
            "--tls-key-file {}: no private key in it (expected PEM: -----BEGIN PRIVATE KEY----- (or RSA/EC PRIVATE KEY))",
            serving.cert.display()
        )
    );
    let e = files(&serving.cert, &serving.key, Some(&serving.key))
        .load()
        .expect_err("no CA")
        .to_string();
    assert_eq!(
        e,
        format!(
            "--client-ca-file {}: no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)",
            serving.key.display()
        )
    );
    // Another certificate's key.
    let e = files(&serving.cert, &other.serving.key, None)
        .load()
        .expect_err("not a pair")
        .to_string();
    assert!(
        e.starts_with(&format!(
            "--tls-cert-file {} and --tls-key-file {} do not make a usable pair: ",
            serving.cert.display(),
            other.serving.key.display()
        )),
        "{e}"
    );
}

/// `GET /ping` over TLS with `files`: the port and the metrics.
async fn serve(files: TlsFiles) -> (u16, Arc<ExtenderMetrics>) {
    let tls = files.load().expect("usable TLS files");
    let metrics = Arc::new(ExtenderMetrics::new());
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let listener = TlsListener::new(tcp, tls.config, metrics.clone()).expect("a listener");
    let port = axum::serve::Listener::local_addr(&listener)
        .expect("an address")
        .port();
    let app = Router::new().route("/ping", get(|| async { "pong" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, metrics)
}

#[tokio::test]
async fn only_clients_with_a_certificate_the_client_ca_signed_get_an_answer() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pki = Pki::create(&dir.path().join("extender")).expect("the extender's CA");
    let cluster = Pki::create(&dir.path().join("cluster")).expect("another CA");
    let (port, metrics) = serve(TlsFiles {
        cert: pki.serving.cert.clone(),
        key: pki.serving.key.clone(),
        client_ca: Some(pki.ca_files.cert.clone()),
    })
    .await;
    let ca = &pki.ca_files.cert;
    let scheduler = pki
        .client("kube-scheduler", "system:kube-scheduler", &[])
        .expect("a client certificate");
    let client = TlsClient::new(ca, Some(&scheduler)).expect("a client");
    let answer = client.request(port, "GET", "/ping", "").await;
    assert_eq!(answer.expect("an answer"), (200, "pong".to_string()));
    // No certificate: refused in the handshake, before any HTTP.
    let anonymous = TlsClient::new(ca, None).expect("a client");
    let e = anonymous
        .request(port, "GET", "/ping", "")
        .await
        .expect_err("no certificate");
    assert_eq!(
        e.alert_received(),
        Some(AlertDescription::CertificateRequired),
        "{e}"
    );
    // A certificate another CA signed (one the API server would take). The
    // two test CAs share a name, so the signature is what fails.
    let stranger = cluster
        .client("admin", "admin", &["system:masters"])
        .expect("a client certificate");
    let e = TlsClient::new(ca, Some(&stranger))
        .expect("a client")
        .request(port, "GET", "/ping", "")
        .await
        .expect_err("another CA");
    assert!(
        matches!(
            e.alert_received(),
            Some(
                AlertDescription::UnknownCA
                    | AlertDescription::BadCertificate
                    | AlertDescription::DecryptError
            )
        ),
        "{e}"
    );
    // Plain HTTP on the TLS port gets no HTTP answer.
    assert_eq!(
        gputopo_testenv::loopback::request(port, "GET", "/ping", "").await,
        None
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(metrics.as_ref()));
        if text.contains("gputopo_extender_tls_handshakes_total{result=\"refused\"} 3")
            && text.contains("gputopo_extender_tls_handshakes_total{result=\"ok\"} 1")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn without_a_client_ca_any_tls_client_is_answered() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pki = Pki::create(dir.path()).expect("a CA");
    let (port, _) = serve(TlsFiles {
        cert: pki.serving.cert.clone(),
        key: pki.serving.key.clone(),
        client_ca: None,
    })
    .await;
    let client = TlsClient::new(&pki.ca_files.cert, None).expect("a client");
    let answer = client.request(port, "GET", "/ping", "").await;
    assert_eq!(answer.expect("an answer"), (200, "pong".to_string()));
}
