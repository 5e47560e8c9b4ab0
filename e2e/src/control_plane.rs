//! The real tier: a cluster made of a real control plane on loopback, built from the upstream
//! Go modules by `make k8s` (`e2e/k8s/build.sh`): etcd, kube-apiserver (TLS, RBAC and Node
//! authorization, ServiceAccount token signing, the default admission plugins),
//! kube-controller-manager (garbage collection, namespace deletion, Deployment -> ReplicaSet ->
//! Pod), kube-scheduler, and kwok, which plays the kubelet of `nodes` fake Nodes so that Pods get
//! Ready without containers.
//!
//! Each cluster keeps its files under `D/<cluster>/` (`pki/`, `etcd/`) and is reached with the
//! admin kubeconfig `D/<cluster>.kubeconfig` (client certificate in `system:masters`), the same
//! path a devcluster writes. atoll's own components never use it: they get ServiceAccount tokens
//! (see [`crate::install`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// The pinned versions, as `e2e/k8s/build.sh` reads them.
pub const VERSIONS_ENV: &str = include_str!("../k8s/versions.env");

/// The ServiceAccount token issuer (and audience) of every real cluster.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The annotation kwok selects the Nodes it plays by.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// The value of `key` in a `KEY=value` file such as `versions.env` (comments and blank lines
/// skipped).
pub fn env_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_string())
}

/// Where `make k8s` puts the binaries of Kubernetes `version`:
/// `$ATOLL_K8S_CACHE`, else `$XDG_CACHE_HOME/atoll/k8s`, else `$HOME/.cache/atoll/k8s`, then
/// `<version>/bin`. The same rule as `e2e/k8s/build.sh --print-bin-dir`.
pub fn default_bin_dir(
    cache: Option<&str>,
    xdg_cache: Option<&str>,
    home: Option<&str>,
    version: &str,
) -> Option<PathBuf> {
    let non_empty = |v: Option<&str>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    let cache = non_empty(cache)
        .or_else(|| non_empty(xdg_cache).map(|d| d.join("atoll/k8s")))
        .or_else(|| non_empty(home).map(|d| d.join(".cache/atoll/k8s")))?;
    Some(cache.join(version).join("bin"))
}

/// The Kubernetes version the binaries are taken for: `K8S_VERSION`, else the pinned one.
pub fn k8s_version() -> String {
    std::env::var("K8S_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| env_value(VERSIONS_ENV, "K8S_VERSION"))
        .unwrap_or_default()
}

/// The `helm` of `make k8s` ([`bin_dir_from_env`]), when it was built.
pub fn helm_from_env() -> Option<PathBuf> {
    bin_dir_from_env()
        .map(|dir| dir.join("helm"))
        .filter(|helm| helm.is_file())
}

/// The directory of the real-tier binaries: `ATOLL_K8S_BIN_DIR`, else [`default_bin_dir`] for
/// [`k8s_version`].
pub fn bin_dir_from_env() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ATOLL_K8S_BIN_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let var = |k: &str| std::env::var(k).ok();
    default_bin_dir(
        var("ATOLL_K8S_CACHE").as_deref(),
        var("XDG_CACHE_HOME").as_deref(),
        var("HOME").as_deref(),
        &k8s_version(),
    )
}

/// The real-tier binaries and kwok's stage configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K8sBinaries {
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kube-apiserver`.
    pub apiserver: PathBuf,
    /// `kube-controller-manager`.
    pub controller_manager: PathBuf,
    /// `kube-scheduler`.
    pub scheduler: PathBuf,
    /// `kwok`.
    pub kwok: PathBuf,
    /// The Stages kwok plays (node initialisation and heartbeat, pod ready/complete/delete),
    /// copied by `make k8s` from the kwok module.
    pub kwok_stages: PathBuf,
}

impl K8sBinaries {
    /// Every binary in `dir`; the error says to run `make k8s`.
    pub fn locate(dir: &Path) -> Result<K8sBinaries, Error> {
        let binaries = K8sBinaries {
            etcd: dir.join("etcd"),
            apiserver: dir.join("kube-apiserver"),
            controller_manager: dir.join("kube-controller-manager"),
            scheduler: dir.join("kube-scheduler"),
            kwok: dir.join("kwok"),
            kwok_stages: dir.join("kwok-stages.yaml"),
        };
        let missing: Vec<String> = [
            &binaries.etcd,
            &binaries.apiserver,
            &binaries.controller_manager,
            &binaries.scheduler,
            &binaries.kwok,
            &binaries.kwok_stages,
        ]
        .into_iter()
        .filter(|p| !p.is_file())
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
        if !missing.is_empty() {
            return Err(Error::LocateK8sBinaries {
                missing: missing.join(", "),
                dir: dir.to_path_buf(),
            });
        }
        Ok(binaries)
    }
}

/// The files of one real cluster, under `D/<name>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFiles {
    /// `D/<name>`.
    pub root: PathBuf,
    /// The admin kubeconfig, `D/<name>.kubeconfig`.
    pub kubeconfig: PathBuf,
}

impl ClusterFiles {
    /// The files of cluster `name` in fleet directory `dir`, with its admin kubeconfig at
    /// `kubeconfig`.
    pub fn new(dir: &Path, name: &str, kubeconfig: PathBuf) -> ClusterFiles {
        ClusterFiles {
            root: dir.join(name),
            kubeconfig,
        }
    }
    fn pki(&self, file: &str) -> PathBuf {
        self.root.join("pki").join(file)
    }
    /// The cluster CA certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.pki("ca.crt")
    }
    /// kube-apiserver's serving certificate and key.
    pub fn serving(&self) -> (PathBuf, PathBuf) {
        (self.pki("apiserver.crt"), self.pki("apiserver.key"))
    }
    /// The ServiceAccount token signing key and its public half.
    pub fn service_account(&self) -> (PathBuf, PathBuf) {
        (self.pki("sa.key"), self.pki("sa.pub"))
    }
    /// etcd's data directory.
    pub fn etcd_data(&self) -> PathBuf {
        self.root.join("etcd")
    }
    /// kube-apiserver's `--cert-dir`.
    pub fn apiserver_dir(&self) -> PathBuf {
        self.root.join("apiserver")
    }
    /// kube-apiserver's client certificate and key towards the kubelets (real nodes only).
    pub fn apiserver_kubelet_client(&self) -> (PathBuf, PathBuf) {
        (
            self.pki("apiserver-kubelet-client.crt"),
            self.pki("apiserver-kubelet-client.key"),
        )
    }
    /// The client certificate and key of real node `node`'s kubelet.
    pub fn kubelet_client(&self, node: &str) -> (PathBuf, PathBuf) {
        (
            self.pki(&format!("kubelet-{node}.crt")),
            self.pki(&format!("kubelet-{node}.key")),
        )
    }
    /// kube-proxy's client certificate and key (real nodes only).
    pub fn kube_proxy_client(&self) -> (PathBuf, PathBuf) {
        (self.pki("kube-proxy.crt"), self.pki("kube-proxy.key"))
    }
}

/// What a control plane needs for real nodes to join it (see [`crate::real_node`]): the
/// address of the host side of their network, which kube-apiserver listens on and advertises
/// instead of loopback, and the names of the nodes, whose kubelets get client certificates.
/// Without it (kwok's fake nodes only) the control plane stays on loopback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeNetwork {
    /// The host's address on the node network (the bridge).
    pub host_address: Ipv4Addr,
    /// The Node names of the real nodes.
    pub nodes: Vec<String>,
}

/// The first address of the Service range `10.96.0.0/16`: the `kubernetes` Service, which pods
/// reach kube-apiserver by.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The address kube-apiserver listens on and the kubeconfigs point at: the node network's host
/// address when real nodes join, else loopback.
pub fn apiserver_host(network: Option<&NodeNetwork>) -> Ipv4Addr {
    network.map_or(Ipv4Addr::LOCALHOST, |n| n.host_address)
}

/// The loopback ports of one real cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// etcd clients.
    pub etcd_client: u16,
    /// etcd peers (a one-member cluster, but etcd listens anyway).
    pub etcd_peer: u16,
    /// kube-apiserver (HTTPS).
    pub apiserver: u16,
    /// kube-controller-manager's health/metrics server.
    pub controller_manager: u16,
    /// kube-scheduler's health/metrics server.
    pub scheduler: u16,
}

/// The cluster's PEM material, written by [`write_pki`].
pub struct Pki {
    /// CA certificate (PEM), also in the kubeconfigs.
    pub ca_pem: String,
    /// Admin client certificate (`CN=atoll-fleet-admin, O=system:masters`).
    pub admin_cert_pem: String,
    /// Its key.
    pub admin_key_pem: String,
}

fn pki_err(what: &str, e: rcgen::Error) -> Error {
    Error::Pki {
        what: what.to_string(),
        message: e.to_string(),
    }
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| Error::CreateFile {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(err)?;
    file.write_all(text.as_bytes()).map_err(err)
}

/// Makes a fresh CA, kube-apiserver's serving certificate for `127.0.0.1`/`localhost`, an admin
/// client certificate and a ServiceAccount signing key, and writes them under `files`.
///
/// With a `network` for real nodes, also: the serving certificate valid for the node network's
/// host address and the `kubernetes` Service IP, kube-apiserver's client certificate towards the
/// kubelets (`system:masters`), one client certificate per kubelet (`system:node:<node>` in
/// `system:nodes`) and kube-proxy's (`system:kube-proxy`). The CA key is not kept.
pub fn write_pki(files: &ClusterFiles, network: Option<&NodeNetwork>) -> Result<Pki, Error> {
    let (ca_pem, issuer) = new_ca("atoll-fleet-ca")?;
    let (serving_pem, serving_key_pem) =
        serving_cert(&issuer, "kube-apiserver", serving_names(network))?;

    let (admin_cert_pem, admin_key_pem) = client_cert(
        &issuer,
        "the admin",
        &[
            (DnType::CommonName, "atoll-fleet-admin"),
            (DnType::OrganizationName, "system:masters"),
        ],
    )?;
    if let Some(network) = network {
        write_node_client_certs(files, &issuer, network)?;
    }

    let sa_key = KeyPair::generate().map_err(|e| pki_err("the ServiceAccount key", e))?;

    let (serving_crt, serving_key_path) = files.serving();
    let (sa_private, sa_public) = files.service_account();
    write_file(&files.ca_cert(), &ca_pem, 0o644)?;
    write_file(&serving_crt, &serving_pem, 0o644)?;
    write_file(&serving_key_path, &serving_key_pem, 0o600)?;
    write_file(&sa_private, &sa_key.serialize_pem(), 0o600)?;
    write_file(&sa_public, &sa_key.public_key_pem(), 0o644)?;
    Ok(Pki {
        ca_pem,
        admin_cert_pem,
        admin_key_pem,
    })
}

/// A fresh CA named `common_name`: its certificate (PEM) and the issuer of what it signs.
fn new_ca(common_name: &str) -> Result<(String, Issuer<'static, KeyPair>), Error> {
    let ca_key = KeyPair::generate().map_err(|e| pki_err("the CA key", e))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())
        .map_err(|e| pki_err("the CA parameters", e))?;
    ca_params.distinguished_name = name(&[(DnType::CommonName, common_name)]);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(|e| pki_err("the CA certificate", e))?;
    Ok((ca_cert.pem(), Issuer::new(ca_params, ca_key)))
}

/// A serving certificate for `names` (DNS names or IP addresses) signed by `issuer`:
/// `(certificate, key)` in PEM.
fn serving_cert(
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    names: Vec<String>,
) -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(|e| pki_err("the serving key", e))?;
    let mut params =
        CertificateParams::new(names).map_err(|e| pki_err("the serving parameters", e))?;
    params.distinguished_name = name(&[(DnType::CommonName, common_name)]);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|e| pki_err("the serving certificate", e))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The hub's TLS material as docs/install.md step 3 makes it with openssl: a CA of its own and
/// a serving certificate for `names` (the addresses agents dial).
#[derive(Clone, Debug)]
pub struct HubTls {
    /// The CA certificate (PEM), each agent's `ca.crt`.
    pub ca_pem: String,
    /// The hub's certificate (PEM), `tls.crt` of Secret `atoll-hub-tls`.
    pub cert_pem: String,
    /// Its key (PEM), `tls.key`.
    pub key_pem: String,
}

/// Mints [`HubTls`] for `names`; the CA key is not kept.
pub fn hub_tls(names: Vec<String>) -> Result<HubTls, Error> {
    let (ca_pem, issuer) = new_ca("atoll-hub-ca")?;
    let (cert_pem, key_pem) = serving_cert(&issuer, "atoll-hub", names)?;
    Ok(HubTls {
        ca_pem,
        cert_pem,
        key_pem,
    })
}

/// The names kube-apiserver's serving certificate is valid for: loopback and the `kubernetes`
/// Service's names, and with real nodes the node network's host address and the Service IP.
fn serving_names(network: Option<&NodeNetwork>) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default.svc".to_string(),
    ];
    if let Some(network) = network {
        names.extend([
            network.host_address.to_string(),
            KUBERNETES_SERVICE_IP.to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ]);
    }
    names
}

/// A client certificate for `subject` signed by `issuer`: `(certificate, key)` in PEM; `what`
/// names it in errors.
fn client_cert(
    issuer: &Issuer<'_, KeyPair>,
    what: &str,
    subject: &[(DnType, &str)],
) -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(|e| pki_err(&format!("{what} key"), e))?;
    let mut params = CertificateParams::new(Vec::<String>::new())
        .map_err(|e| pki_err(&format!("{what} parameters"), e))?;
    params.distinguished_name = name(subject);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|e| pki_err(&format!("{what} certificate"), e))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes a client certificate for `subject` at `(cert, key)`.
fn write_client_cert(
    issuer: &Issuer<'_, KeyPair>,
    what: &str,
    subject: &[(DnType, &str)],
    (cert, key): (PathBuf, PathBuf),
) -> Result<(), Error> {
    let (cert_pem, key_pem) = client_cert(issuer, what, subject)?;
    write_file(&cert, &cert_pem, 0o644)?;
    write_file(&key, &key_pem, 0o600)
}

/// The client certificates real nodes need: kube-apiserver's towards the kubelets, each
/// kubelet's and kube-proxy's.
fn write_node_client_certs(
    files: &ClusterFiles,
    issuer: &Issuer<'_, KeyPair>,
    network: &NodeNetwork,
) -> Result<(), Error> {
    write_client_cert(
        issuer,
        "the apiserver's kubelet client",
        &[
            (DnType::CommonName, "kube-apiserver-kubelet-client"),
            (DnType::OrganizationName, "system:masters"),
        ],
        files.apiserver_kubelet_client(),
    )?;
    write_client_cert(
        issuer,
        "kube-proxy's client",
        &[(DnType::CommonName, "system:kube-proxy")],
        files.kube_proxy_client(),
    )?;
    for node in &network.nodes {
        write_client_cert(
            issuer,
            &format!("the kubelet client of {node}"),
            &[
                (DnType::CommonName, &format!("system:node:{node}")),
                (DnType::OrganizationName, "system:nodes"),
            ],
            files.kubelet_client(node),
        )?;
    }
    Ok(())
}

fn name(parts: &[(DnType, &str)]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (kind, value) in parts {
        dn.push(kind.clone(), *value);
    }
    dn
}

/// `text` in standard base64, as Secret `data` and kubeconfig `*-data` fields hold it.
pub fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A kubeconfig for `https://127.0.0.1:<port>` trusting `ca_pem`, with one user credential:
/// a client certificate and key, or a bearer token.
pub fn kubeconfig(name: &str, port: u16, ca_pem: &str, user: &Credential<'_>) -> String {
    kubeconfig_at(name, Ipv4Addr::LOCALHOST, port, ca_pem, user)
}

/// [`kubeconfig`] for `https://<host>:<port>`.
pub fn kubeconfig_at(
    name: &str,
    host: Ipv4Addr,
    port: u16,
    ca_pem: &str,
    user: &Credential<'_>,
) -> String {
    let user_fields = match user {
        Credential::Certificate { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(cert_pem),
            b64(key_pem)
        ),
        Credential::Token(token) => format!("    token: {token}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: https://{host}:{port}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\ncurrent-context: {name}\nusers:\n- name: {name}\n  user:\n{user_fields}",
        ca = b64(ca_pem),
    )
}

/// How a kubeconfig's user authenticates.
pub enum Credential<'a> {
    /// A client certificate and its key (PEM).
    Certificate {
        /// The certificate.
        cert_pem: &'a str,
        /// The key.
        key_pem: &'a str,
    },
    /// A bearer token (a ServiceAccount token from TokenRequest).
    Token(&'a str),
}

/// Writes `text` to `path` readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    write_file(path, text, 0o600)
}

fn loopback(port: u16) -> String {
    SocketAddr::from(([127, 0, 0, 1], port)).to_string()
}

/// etcd's command line: one member on loopback, data in `files`. fsync is off: this is a test
/// fleet, and the apiserver's own behaviour is what is under test, not the disk.
pub fn etcd_args(name: &str, files: &ClusterFiles, ports: Ports) -> Vec<String> {
    let client = format!("http://{}", loopback(ports.etcd_client));
    let peer = format!("http://{}", loopback(ports.etcd_peer));
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", files.etcd_data().display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={name}={peer}"),
        "--auto-compaction-retention=1".into(),
        "--quota-backend-bytes=4294967296".into(),
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

/// kube-apiserver's command line: TLS with the cluster CA, client certificates and
/// ServiceAccount tokens, `Node,RBAC` authorization and the default admission plugins.
/// With a `network` for real nodes, it listens on and advertises the node network's host
/// address, and reaches the kubelets with a client certificate.
pub fn apiserver_args(
    files: &ClusterFiles,
    ports: Ports,
    network: Option<&NodeNetwork>,
) -> Vec<String> {
    let (cert, key) = files.serving();
    let (sa_private, sa_public) = files.service_account();
    let host = apiserver_host(network);
    let mut args = vec![
        format!("--etcd-servers=http://{}", loopback(ports.etcd_client)),
        format!("--bind-address={host}"),
        format!("--advertise-address={host}"),
        format!("--secure-port={}", ports.apiserver),
        format!("--cert-dir={}", files.apiserver_dir().display()),
        format!("--tls-cert-file={}", cert.display()),
        format!("--tls-private-key-file={}", key.display()),
        format!("--client-ca-file={}", files.ca_cert().display()),
        format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
        format!("--service-account-key-file={}", sa_public.display()),
        format!(
            "--service-account-signing-key-file={}",
            sa_private.display()
        ),
        "--authorization-mode=Node,RBAC".into(),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        "--allow-privileged=true".into(),
        "--v=1".into(),
    ];
    match network {
        // No kubelets or Services carry traffic here, and the endpoint reconciler would publish
        // the loopback address, which Endpoints validation refuses.
        None => args.push("--endpoint-reconciler-type=none".into()),
        // Real nodes: the `kubernetes` Service gets the node network's host address, which
        // pods reach; logs and exec reach the kubelets by their InternalIP with a client
        // certificate.
        Some(_) => {
            let (kubelet_cert, kubelet_key) = files.apiserver_kubelet_client();
            args.extend([
                format!("--kubelet-client-certificate={}", kubelet_cert.display()),
                format!("--kubelet-client-key={}", kubelet_key.display()),
                "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
            ]);
        }
    }
    args
}

/// kube-controller-manager's command line: every default controller, ServiceAccount
/// credentials per controller (as in a kubeadm cluster), no leader election.
pub fn controller_manager_args(files: &ClusterFiles, ports: Ports) -> Vec<String> {
    let kubeconfig = files.kubeconfig.display().to_string();
    let (sa_private, _) = files.service_account();
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.controller_manager),
        format!("--root-ca-file={}", files.ca_cert().display()),
        format!(
            "--service-account-private-key-file={}",
            sa_private.display()
        ),
        "--use-service-account-credentials=true".into(),
        "--leader-elect=false".into(),
        "--v=1".into(),
    ]
}

/// kube-scheduler's command line.
pub fn scheduler_args(files: &ClusterFiles, ports: Ports) -> Vec<String> {
    let kubeconfig = files.kubeconfig.display().to_string();
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.scheduler),
        "--leader-elect=false".into(),
        "--v=1".into(),
    ]
}

/// kwok's command line: it plays the Nodes annotated `kwok.x-k8s.io/node=fake` and their Pods,
/// with the Stages in `stages`. No server of its own (no `--server-address`, node port 0):
/// kwok v0.8.0 sometimes dies at start-up with "concurrent map writes" while it installs that
/// server's metrics, and nothing here uses its kubelet API.
pub fn kwok_args(files: &ClusterFiles, stages: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", files.kubeconfig.display()),
        format!("--config={}", stages.display()),
        "--manage-all-nodes=false".into(),
        format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
        "--node-port=0".into(),
        "--node-ip=127.0.0.1".into(),
    ]
}

/// The fake Node `name` that kwok plays: 32 CPUs, 256 GiB, 110 pods, no taints.
pub fn fake_node(name: &str) -> serde_json::Value {
    let resources = serde_json::json!({"cpu": "32", "memory": "256Gi", "pods": "110"});
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
            },
        },
        "status": {"allocatable": resources.clone(), "capacity": resources},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_pinned_file_and_comments_are_skipped() {
        let text = "# K8S_VERSION=v0.0.0\nK8S_VERSION=v1.33.13\nETCD_VERSION=v3.6.16\n";
        assert_eq!(env_value(text, "K8S_VERSION").as_deref(), Some("v1.33.13"));
        assert_eq!(env_value(text, "ETCD_VERSION").as_deref(), Some("v3.6.16"));
        assert_eq!(env_value(text, "KWOK"), None);
        assert!(env_value(VERSIONS_ENV, "K8S_VERSION").is_some_and(|v| v.starts_with("v1.")));
    }

    #[test]
    fn the_bin_dir_follows_the_same_rule_as_the_build_script() {
        let cases = [
            (Some("/c"), Some("/x"), Some("/h"), "/c/v1.33.13/bin"),
            (None, Some("/x"), Some("/h"), "/x/atoll/k8s/v1.33.13/bin"),
            (
                Some(""),
                None,
                Some("/h"),
                "/h/.cache/atoll/k8s/v1.33.13/bin",
            ),
        ];
        for (cache, xdg, home, want) in cases {
            assert_eq!(
                default_bin_dir(cache, xdg, home, "v1.33.13"),
                Some(PathBuf::from(want))
            );
        }
        assert_eq!(default_bin_dir(None, None, None, "v1"), None);
    }

    #[test]
    fn the_apiserver_authorizes_with_rbac_and_signs_service_account_tokens() {
        let files = ClusterFiles::new(Path::new("/f"), "parent", "/f/parent.kubeconfig".into());
        let ports = Ports {
            etcd_client: 1,
            etcd_peer: 2,
            apiserver: 3,
            controller_manager: 4,
            scheduler: 5,
        };
        let args = apiserver_args(&files, ports, None).join(" ");
        for want in [
            "--etcd-servers=http://127.0.0.1:1",
            "--secure-port=3",
            "--authorization-mode=Node,RBAC",
            "--client-ca-file=/f/parent/pki/ca.crt",
            "--service-account-signing-key-file=/f/parent/pki/sa.key",
            "--service-account-key-file=/f/parent/pki/sa.pub",
        ] {
            assert!(args.contains(want), "{want} missing from {args}");
        }
        let etcd = etcd_args("parent", &files, ports).join(" ");
        assert!(etcd.contains("--initial-cluster=parent=http://127.0.0.1:2"));
        assert!(etcd.contains("--data-dir=/f/parent/etcd"));
        let kcm = controller_manager_args(&files, ports).join(" ");
        assert!(kcm.contains("--kubeconfig=/f/parent.kubeconfig"));
        assert!(kcm.contains("--use-service-account-credentials=true"));
    }

    #[test]
    fn kubeconfigs_carry_the_ca_and_exactly_one_credential() {
        let token = kubeconfig("hub", 6443, "CA", &Credential::Token("abc"));
        let parsed: serde_yaml::Value = serde_yaml::from_str(&token).unwrap();
        assert_eq!(
            parsed["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(
            parsed["clusters"][0]["cluster"]["certificate-authority-data"],
            b64("CA").as_str()
        );
        assert_eq!(parsed["users"][0]["user"]["token"], "abc");
        assert!(parsed["users"][0]["user"]["client-key-data"].is_null());
        let cert = kubeconfig(
            "admin",
            1,
            "CA",
            &Credential::Certificate {
                cert_pem: "C",
                key_pem: "K",
            },
        );
        let parsed: serde_yaml::Value = serde_yaml::from_str(&cert).unwrap();
        assert_eq!(
            parsed["users"][0]["user"]["client-certificate-data"],
            b64("C").as_str()
        );
        assert!(parsed["users"][0]["user"]["token"].is_null());
    }

    #[test]
    fn fake_nodes_are_selected_by_kwok_and_have_capacity() {
        let node = fake_node("kwok-node-1");
        assert_eq!(
            node["metadata"]["annotations"][KWOK_NODE_ANNOTATION],
            "fake"
        );
        assert_eq!(node["status"]["allocatable"]["cpu"], "32");
        assert!(node["spec"]["taints"].is_null());
    }
}
