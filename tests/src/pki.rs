//! The certificates a control plane needs, made with `rcgen` (pure Rust): a
//! CA, a serving certificate for 127.0.0.1/localhost shared by every
//! component, client certificates (Kubernetes reads the user from CN and the
//! groups from O), and the service-account token signing key.
//!
//! Keys are ECDSA P-256, which Kubernetes accepts everywhere (TLS, client
//! certificates, ES256 service-account tokens).

use anyhow::{Context as _, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
    pub ca_files: CertFiles,
    pub serving: CertFiles,
    /// Service-account token signing key (private) and its public half.
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

impl Pki {
    pub fn create(dir: &Path) -> anyhow::Result<Pki> {
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn("gputopo-testenv-ca", &[])?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = params.self_signed(&ca_key)?;
        let ca_files = write_pair(dir, "ca", &ca_cert.pem(), &ca_key.serialize_pem())?;
        let ca = Issuer::new(params, ca_key);

        let mut pki = Pki {
            dir: dir.to_owned(),
            ca,
            ca_files: ca_files.clone(),
            serving: ca_files,
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        };

        let mut serving = CertificateParams::default();
        serving.distinguished_name = dn("127.0.0.1", &[])?;
        serving.subject_alt_names = vec![
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::DnsName("localhost".try_into()?),
            // The in-cluster names of the apiserver, for clients that use them.
            SanType::DnsName("kubernetes".try_into()?),
            SanType::DnsName("kubernetes.default".try_into()?),
            SanType::DnsName("kubernetes.default.svc".try_into()?),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1))),
        ];
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        pki.serving = pki.issue("serving", serving)?;

        let sa = KeyPair::generate()?;
        std::fs::write(&pki.sa_key, sa.serialize_pem())?;
        std::fs::write(&pki.sa_pub, sa.public_key_pem())?;
        Ok(pki)
    }

    /// A client certificate for `user` in `groups`, written as `<file_stem>.crt/.key`.
    ///
    /// At most two groups: rcgen keeps one attribute per type in a
    /// distinguished name, so the second group is written as a custom
    /// attribute with the same OID (2.5.4.10), which Go reads as a second O.
    pub fn client(
        &self,
        file_stem: &str,
        user: &str,
        groups: &[&str],
    ) -> anyhow::Result<CertFiles> {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(user, groups)?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(file_stem, params)
    }

    fn issue(&self, file_stem: &str, params: CertificateParams) -> anyhow::Result<CertFiles> {
        let key = KeyPair::generate()?;
        let cert = params
            .signed_by(&key, &self.ca)
            .with_context(|| format!("signing the {file_stem} certificate"))?;
        write_pair(&self.dir, file_stem, &cert.pem(), &key.serialize_pem())
    }
}

fn dn(common_name: &str, groups: &[&str]) -> anyhow::Result<DistinguishedName> {
    let mut dn = DistinguishedName::new();
    match groups {
        [] => {}
        [one] => dn.push(DnType::OrganizationName, *one),
        [one, two] => {
            dn.push(DnType::OrganizationName, *one);
            dn.push(DnType::CustomDnType(vec![2, 5, 4, 10]), *two);
        }
        _ => bail!(
            "a test client certificate carries at most two groups (O attributes), got {groups:?}"
        ),
    }
    dn.push(DnType::CommonName, common_name);
    Ok(dn)
}

fn write_pair(dir: &Path, stem: &str, cert: &str, key: &str) -> anyhow::Result<CertFiles> {
    let files = CertFiles {
        cert: dir.join(format!("{stem}.crt")),
        key: dir.join(format!("{stem}.key")),
    };
    std::fs::write(&files.cert, cert)?;
    std::fs::write(&files.key, key)?;
    Ok(files)
}
