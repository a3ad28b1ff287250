//! A node's identity in a real cluster: a client certificate of `system:node:<node>` (group
//! `system:nodes`) signed by the cluster CA with `openssl`, and a kubeconfig that uses it, as
//! kubeadm would give a node. The tests against the real control plane and the benchmark's
//! `api` part both join nodes this way.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cluster a node joins: its API server and CA (certificate and key files).
pub struct ClusterCa<'a> {
    pub server: &'a str,
    pub ca: &'a str,
    pub ca_key: &'a str,
}

/// Writes `<dir>/<node>.{key,crt,kubeconfig}` (and the signing request's files) and returns the
/// kubeconfig's path; panics (fails the caller) when `openssl` refuses.
pub fn node_kubeconfig(cluster: &ClusterCa, node: &str, dir: &Path) -> PathBuf {
    let base = dir.join(node);
    let file = |ext: &str| base.with_extension(ext).display().to_string();
    std::fs::write(
        file("ext"),
        "[ext]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,\
         keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .expect("write the certificate's extensions");
    let subject = format!("/O=system:nodes/CN=system:node:{node}");
    let (key, csr, crt, srl, ext) = (
        file("key"),
        file("csr"),
        file("crt"),
        file("srl"),
        file("ext"),
    );
    let steps: [&[&str]; 3] = [
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &key,
        ],
        &["req", "-new", "-key", &key, "-subj", &subject, "-out", &csr],
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            cluster.ca,
            "-CAkey",
            cluster.ca_key,
            "-CAcreateserial",
            "-CAserial",
            &srl,
            "-days",
            "2",
            "-sha256",
            "-extfile",
            &ext,
            "-extensions",
            "ext",
            "-out",
            &crt,
        ],
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let kubeconfig = base.with_extension("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: node\n  user:\n    client-certificate: {crt}\n    \
             client-key: {key}\ncontexts:\n- name: real\n  context: {{cluster: real, user: node}}\n\
             current-context: real\n",
            cluster.server, cluster.ca,
        ),
    )
    .expect("write the node's kubeconfig");
    kubeconfig
}
