//! The key of a decision file: everything the choice depends on. The same shapes choose
//! differently behind a PCIe switch and on root ports, on another driver or NCCL build, at
//! another world size ("a static topology label is insufficient"), so the key holds the GPUs by
//! UUID and PCI address in rank order, their peer-access matrix, the driver, the NCCL file and
//! version, the verifybench version, the world size, the dtype, the hidden size, the token
//! counts and the NCCL settings compared; a modeled decision holds the cost-model profile (its
//! name and a hash of its parameters) instead of the machine. A run whose key equals the
//! file's reuses the file; any part that differs is named and the choice is measured again.

use serde::{Deserialize, Serialize};

use crate::machine::{GpuIdentity, Identity};
use crate::model::DType;

/// What a decision depends on (see the module comment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Fingerprint {
    /// `nccl` (measured) or `model` (modeled).
    pub(crate) backend: String,
    /// The GPUs in rank order (none when modeled).
    #[serde(default)]
    pub(crate) gpus: Vec<GpuIdentity>,
    /// Peer access between the GPUs, one row per GPU (`1` where it reaches the other).
    #[serde(default)]
    pub(crate) p2p_matrix: Vec<String>,
    pub(crate) driver: Option<String>,
    /// The NCCL library file this machine loads.
    pub(crate) nccl_file: Option<String>,
    pub(crate) nccl_version: Option<String>,
    /// Modeled: the cost-model profile's name and a hash of its parameters.
    pub(crate) model_profile: Option<String>,
    pub(crate) verifybench_version: String,
    /// The workload and what is compared, as fields of the key itself in the file.
    #[serde(flatten)]
    pub(crate) work: KeyOfWork,
}

/// What a key holds beside the machine: the workload and what is compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeyOfWork {
    pub(crate) world_size: usize,
    pub(crate) dtype: DType,
    pub(crate) hidden_size: u64,
    /// The token counts of the cycle's forwards (the message sizes follow from them).
    pub(crate) tokens: Vec<u64>,
    /// The NCCL settings compared beside NCCL's default (`NCCL_PROTO=LL`, ...).
    pub(crate) nccl_settings: Vec<String>,
}

impl Fingerprint {
    /// The key of a measurement on the GPUs `id` describes.
    pub(crate) fn measured(id: &Identity, w: &KeyOfWork) -> Fingerprint {
        Fingerprint {
            backend: "nccl".into(),
            gpus: id.gpus.clone(),
            p2p_matrix: id
                .peer_access
                .iter()
                .map(|row| row.iter().map(|&b| if b { '1' } else { '0' }).collect())
                .collect(),
            driver: id.driver.clone(),
            nccl_file: id.nccl_library.clone(),
            nccl_version: id.nccl_version.clone(),
            model_profile: None,
            ..Fingerprint::of_work("nccl", w)
        }
    }

    /// The key of a modeled decision on the profile `label` whose parameters hash to `hash`.
    pub(crate) fn modeled(label: &str, hash: u64, w: &KeyOfWork) -> Fingerprint {
        Fingerprint {
            model_profile: Some(format!("{label} (parameters {hash:016x})")),
            ..Fingerprint::of_work("model", w)
        }
    }

    fn of_work(backend: &str, w: &KeyOfWork) -> Fingerprint {
        Fingerprint {
            backend: backend.into(),
            gpus: vec![],
            p2p_matrix: vec![],
            driver: None,
            nccl_file: None,
            nccl_version: None,
            model_profile: None,
            verifybench_version: env!("CARGO_PKG_VERSION").into(),
            work: w.clone(),
        }
    }

    /// Every part, named as messages name it, with its value as words.
    pub(crate) fn parts(&self) -> Vec<(&'static str, String)> {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let list = |v: Vec<String>| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(", ")
            }
        };
        vec![
            ("backend", self.backend.clone()),
            (
                "GPUs",
                list(
                    self.gpus
                        .iter()
                        .map(|g| {
                            format!(
                                "{} {} at {}",
                                g.name,
                                g.uuid.as_deref().unwrap_or("(no UUID)"),
                                g.pci_bus_id
                            )
                        })
                        .collect(),
                ),
            ),
            ("P2P matrix", list(self.p2p_matrix.clone())),
            ("driver", opt(&self.driver)),
            ("NCCL file", opt(&self.nccl_file)),
            ("NCCL version", opt(&self.nccl_version)),
            ("cost-model profile", opt(&self.model_profile)),
            ("verifybench version", self.verifybench_version.clone()),
            ("world size", self.work.world_size.to_string()),
            ("dtype", self.work.dtype.name().to_string()),
            ("hidden size", self.work.hidden_size.to_string()),
            (
                "tokens",
                list(self.work.tokens.iter().map(|t| t.to_string()).collect()),
            ),
            (
                "NCCL settings",
                list(
                    std::iter::once("default".to_string())
                        .chain(self.work.nccl_settings.iter().cloned())
                        .collect(),
                ),
            ),
        ]
    }

    /// The parts that differ from `now`: `driver was 580.95.05, now 580.105.08`.
    pub(crate) fn changes(&self, now: &Fingerprint) -> Vec<String> {
        self.parts()
            .into_iter()
            .zip(now.parts())
            .filter(|((_, a), (_, b))| a != b)
            .map(|((name, a), (_, b))| format!("{name} was {a}, now {b}"))
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A measured key of two GPUs as a test machine would give it.
    pub(crate) fn two_gpus() -> Fingerprint {
        let id = Identity {
            gpus: (0..2)
                .map(|i| GpuIdentity {
                    name: "NVIDIA RTX PRO 6000 Blackwell Server Edition".into(),
                    uuid: Some(format!("GPU-0000000{i}-1111-2222-3333-444444444444")),
                    pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + i),
                })
                .collect(),
            peer_access: vec![vec![true, true], vec![true, true]],
            driver: Some("580.95.05".into()),
            nccl_library: Some("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3".into()),
            nccl_version: Some("2.28.3".into()),
        };
        Fingerprint::measured(
            &id,
            &KeyOfWork {
                world_size: 2,
                dtype: DType::Bf16,
                hidden_size: 7168,
                tokens: vec![1, 4],
                nccl_settings: vec![],
            },
        )
    }

    #[test]
    fn every_changed_part_is_named_with_both_values() {
        let a = two_gpus();
        assert!(a.changes(&a.clone()).is_empty());
        let mut b = a.clone();
        b.driver = Some("580.105.08".into());
        b.nccl_file = Some("/opt/nccl/lib/libnccl.so.2".into());
        assert_eq!(
            a.changes(&b),
            vec![
                "driver was 580.95.05, now 580.105.08".to_string(),
                "NCCL file was /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3, now /opt/nccl/lib/libnccl.so.2".into(),
            ]
        );
        let mut c = a.clone();
        c.p2p_matrix = vec!["10".into(), "01".into()];
        c.gpus.swap(0, 1);
        let ch = a.changes(&c);
        assert!(ch[0].starts_with("GPUs was NVIDIA"), "{ch:?}");
        assert_eq!(ch[1], "P2P matrix was 11, 11, now 10, 01");
        // The key survives its own JSON.
        let back: Fingerprint = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }
}
