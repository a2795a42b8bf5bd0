//! Throwaway TLS material for a TLS [`RedisServer`](super::RedisServer):
//! [`make_test_certs`] drives the `openssl` CLI to make a CA, a server
//! certificate and a client certificate, and returns the [`TlsFiles`] the
//! server is configured with.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::EmbeddedError;

/// Name of the client certificate [`make_test_certs`] writes.
pub const CLIENT_CERT_FILE: &str = "client.crt";

/// Name of the client key [`make_test_certs`] writes.
pub const CLIENT_KEY_FILE: &str = "client.key";

/// Certificate files for a TLS [`RedisServer`](super::RedisServer), as made by
/// [`make_test_certs`].
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// The CA certificate that signs server and client certificates (PEM).
    pub ca: PathBuf,
    /// Require clients to present a certificate signed by `ca`
    /// (`tls-auth-clients yes`).
    pub require_client_cert: bool,
}

/// Creates throwaway TLS material in `dir` with the `openssl` CLI: a CA
/// (`ca.crt`, `ca.key`), a server certificate for `127.0.0.1` and `localhost`
/// signed by it (`server.crt`, `server.key`), and a client certificate
/// ([`CLIENT_CERT_FILE`], [`CLIENT_KEY_FILE`]), all ECDSA P-256, PEM, valid
/// for ten years.
///
/// The returned [`TlsFiles`] point at the CA and the server's files, with
/// `require_client_cert` off; set it to make the server demand the client
/// certificate.
pub fn make_test_certs(dir: &Path) -> Result<TlsFiles, EmbeddedError> {
    fs::create_dir_all(dir).map_err(|e| EmbeddedError::io(format!("creating {dir:?}"), e))?;
    let cnf = dir.join("openssl.cnf");
    fs::write(&cnf, OPENSSL_CNF).map_err(|e| EmbeddedError::io(format!("writing {cnf:?}"), e))?;
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let days = ["-days", "3650"];
    let cfg = ["-config", "openssl.cnf"];

    let mut ca = vec!["req", "-x509", "-new", "-nodes", "-extensions", "v3_ca"];
    ca.extend(cfg);
    ca.extend(ec);
    ca.extend(days);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    ca.extend(["-subj", "/CN=hitcount test CA"]);
    openssl(dir, "creating the CA", &ca)?;

    for (name, cn, ext) in [
        ("server", "/CN=localhost", "server_ext"),
        ("client", "/CN=hitcount test client", "client_ext"),
    ] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let mut req = vec!["req", "-new", "-nodes"];
        req.extend(cfg);
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", cn]);
        openssl(dir, "creating a certificate request", &req)?;
        let mut sign = vec!["x509", "-req", "-in", &csr, "-CA", "ca.crt"];
        sign.extend(["-CAkey", "ca.key", "-CAcreateserial", "-out", &crt]);
        sign.extend(days);
        sign.extend(["-extfile", "openssl.cnf", "-extensions", ext]);
        openssl(dir, "signing a certificate", &sign)?;
    }
    Ok(TlsFiles {
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
        ca: dir.join("ca.crt"),
        require_client_cert: false,
    })
}

const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = hitcount test

[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// Runs `openssl args…` in `dir`.
fn openssl(dir: &Path, step: &'static str, args: &[&str]) -> Result<(), EmbeddedError> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| EmbeddedError::Certs {
            step,
            message: match e.kind() {
                io::ErrorKind::NotFound => "the openssl CLI is not installed: install Debian's \
                     openssl (e.g. `apt-get install -y openssl`, or run scripts/ensure-deps)"
                    .to_string(),
                _ => format!("cannot run openssl: {e}"),
            },
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(EmbeddedError::Certs {
            step,
            message: format!(
                "openssl {} ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    }
}
