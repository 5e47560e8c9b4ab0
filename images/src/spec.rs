//! What each image holds: the runtime stages of the repository's `Dockerfile`, described as data
//! (a test checks that the two agree).

/// The user every image runs as (distroless's `nonroot`), as the manifests' securityContext says.
pub const USER: u32 = 65532;

/// Where the binaries go.
pub const BIN_DIR: &str = "usr/local/bin";

/// The admin server's port (`/metrics`, `/healthz`, `/readyz`), exposed by every image.
pub const ADMIN_PORT: u16 = 9090;

/// One image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSpec {
    /// The Dockerfile target and the image's short name: `hub`.
    pub target: &'static str,
    /// The binary (built by cargo) it runs, in [`BIN_DIR`].
    pub binary: &'static str,
    /// Whether it carries helm in [`BIN_DIR`].
    pub helm: bool,
    /// Ports it exposes besides [`ADMIN_PORT`].
    pub ports: &'static [u16],
    /// `org.opencontainers.image.title`.
    pub title: &'static str,
    /// `org.opencontainers.image.description`.
    pub description: &'static str,
}

impl ImageSpec {
    /// The entrypoint: the binary, by its absolute path.
    pub fn entrypoint(&self) -> String {
        format!("/{BIN_DIR}/{}", self.binary)
    }

    /// Every port it exposes, the admin port first.
    pub fn exposed_ports(&self) -> Vec<u16> {
        std::iter::once(ADMIN_PORT)
            .chain(self.ports.iter().copied())
            .collect()
    }
}

/// The images `make images` builds.
pub const IMAGES: [ImageSpec; 4] = [
    ImageSpec {
        target: "scheduler",
        binary: "atoll-scheduler",
        helm: false,
        ports: &[],
        title: "atoll-scheduler",
        description: "Turns Subscriptions and overrides into one Description per chosen cluster",
    },
    ImageSpec {
        target: "hub",
        binary: "atoll-hub",
        helm: true,
        ports: &[8443],
        title: "atoll-hub",
        description: "gRPC hub streaming Descriptions to atoll agents",
    },
    ImageSpec {
        target: "agent",
        binary: "atoll-agent",
        helm: true,
        ports: &[],
        title: "atoll-agent",
        description: "Registers a child cluster with the hub and applies its Descriptions",
    },
    ImageSpec {
        target: "kubectl-atoll",
        binary: "kubectl-atoll",
        helm: false,
        ports: &[],
        title: "kubectl-atoll",
        description: "kubectl plugin for an atoll fleet: clusters, registrations, status, plan, Manifests",
    },
];

/// `/etc/passwd` of every image: root, nobody and nonroot, as distroless has them.
pub const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";

/// `/etc/group` of every image.
pub const GROUP: &str = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n";

/// `/etc/nsswitch.conf`: files, then DNS, for glibc's resolver.
pub const NSSWITCH: &str = "passwd: files\ngroup: files\nhosts: files dns\n";

/// Where the CA bundle goes, and the `SSL_CERT_FILE` every image sets.
pub const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";

/// The environment of every image.
pub fn env() -> Vec<String> {
    vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        format!("SSL_CERT_FILE=/{CA_BUNDLE}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// One stage of the Dockerfile: its base, and its instructions with their arguments.
    #[derive(Debug, Default)]
    struct Stage {
        from: String,
        instructions: Vec<(String, String)>,
    }

    /// The stages of a Dockerfile by name, continuation lines joined, comments dropped.
    fn stages(dockerfile: &str) -> BTreeMap<String, Stage> {
        let joined = dockerfile.replace("\\\n", " ");
        let mut stages = BTreeMap::new();
        let mut current: Option<(String, Stage)> = None;
        for line in joined.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
            if instruction == "FROM" {
                if let Some((name, stage)) = current.take() {
                    stages.insert(name, stage);
                }
                let words: Vec<&str> = rest.split_whitespace().collect();
                let name = match words.as_slice() {
                    [from, "AS", name] => (from.to_string(), name.to_string()),
                    _ => panic!("a stage without a name: {line}"),
                };
                current = Some((
                    name.1,
                    Stage {
                        from: name.0,
                        ..Stage::default()
                    },
                ));
            } else if let Some((_, stage)) = current.as_mut() {
                stage
                    .instructions
                    .push((instruction.to_owned(), rest.trim().to_owned()));
            }
        }
        if let Some((name, stage)) = current {
            stages.insert(name, stage);
        }
        stages
    }

    fn args<'a>(stage: &'a Stage, instruction: &str) -> Vec<&'a str> {
        stage
            .instructions
            .iter()
            .filter(|(i, _)| i == instruction)
            .map(|(_, a)| a.as_str())
            .collect()
    }

    /// `key="value"` pairs of LABEL instructions.
    fn labels(stage: &Stage) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for text in args(stage, "LABEL") {
            let mut rest = text.trim();
            while let Some((key, after)) = rest.split_once("=\"") {
                let (value, tail) = after.split_once('"').unwrap();
                out.insert(key.trim().to_owned(), value.to_owned());
                rest = tail.trim();
            }
        }
        out
    }

    #[test]
    fn the_images_are_the_dockerfiles_runtime_stages() {
        let stages = stages(include_str!("../../Dockerfile"));
        let base = &stages["runtime-base"];
        assert_eq!(args(base, "USER"), [format!("{USER}:{USER}")]);
        assert_eq!(args(base, "EXPOSE"), [ADMIN_PORT.to_string()]);
        for spec in &IMAGES {
            let stage = stages
                .get(spec.target)
                .unwrap_or_else(|| panic!("the Dockerfile has no stage {}", spec.target));
            assert_eq!(stage.from, "runtime-base", "{}", spec.target);
            assert_eq!(
                args(stage, "ENTRYPOINT"),
                [format!("[\"{}\"]", spec.entrypoint())],
                "{}",
                spec.target
            );
            let copied: BTreeSet<String> = args(stage, "COPY")
                .iter()
                .map(|a| a.split_whitespace().last().unwrap().to_owned())
                .collect();
            let mut files = BTreeSet::from([spec.entrypoint()]);
            if spec.helm {
                files.insert(format!("/{BIN_DIR}/helm"));
            }
            assert_eq!(copied, files, "{}", spec.target);
            let exposed: BTreeSet<u16> = std::iter::once(ADMIN_PORT)
                .chain(args(stage, "EXPOSE").iter().map(|p| p.parse().unwrap()))
                .collect();
            assert_eq!(
                exposed,
                spec.exposed_ports().into_iter().collect(),
                "{}",
                spec.target
            );
            let labels = labels(stage);
            assert_eq!(labels["org.opencontainers.image.title"], spec.title);
            assert_eq!(
                labels["org.opencontainers.image.description"],
                spec.description
            );
            assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
        }
        let targets: BTreeSet<&str> = IMAGES.iter().map(|s| s.target).collect();
        let runtime: BTreeSet<&str> = stages
            .iter()
            .filter(|(_, s)| s.from == "runtime-base")
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(
            runtime, targets,
            "every runtime stage is an image and the reverse"
        );
    }
}
