//! What a profile may hold: every parameter finite and of its sign, every protocol's rate
//! within its link's physical rate, every hop no faster than a measured peer-to-peer write.

use super::{Algo, Profile, Proto};

/// One parameter against its physical bound.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Bound {
    /// The parameter (`intra.bw_gbps`, `LL rate`, ...).
    pub(crate) name: String,
    pub(crate) value: f64,
    /// The bound the value must not pass.
    pub(crate) bound: f64,
    /// `max` (value <= bound) or `min` (value >= bound).
    pub(crate) side: &'static str,
    /// Where the bound comes from.
    pub(crate) why: String,
}

impl Bound {
    pub(crate) fn holds(&self) -> bool {
        // A value fitted onto its bound may sit a rounding error past it.
        let tol = 1e-9 * self.bound.abs().max(1.0);
        match self.side {
            "max" => self.value <= self.bound + tol,
            _ => self.value >= self.bound - tol,
        }
    }
}

impl Profile {
    /// The bandwidth each protocol moves payload at on the link within a node, GB/s: Simple
    /// and LL128 the link's Simple bandwidth times their payload share, LL the lower of that
    /// and its ceiling, and the fitted LL rate where there is one.
    pub(crate) fn proto_gbps(&self, proto: Proto) -> f64 {
        let bw = self.intra.bw_gbps * proto.efficiency();
        match proto {
            Proto::Ll => {
                let b = bw.min(self.ll_max_gbps);
                self.ll_fitted.map(|f| f.gbps.max(b)).unwrap_or(b)
            }
            _ => bw,
        }
    }

    /// Every bandwidth against the link's physical rate times the protocol's payload share
    /// (LL 1/2, LL128 120/128, Simple 1), and, given the measured peer-to-peer latency
    /// `p2p_lat_us`, every per-hop latency against it (a hop cannot cross faster than one
    /// write reaches the peer). Empty where the profile does not know its link's rate.
    pub(crate) fn bounds(&self, p2p_lat_us: Option<f64>) -> Vec<Bound> {
        let mut out = vec![];
        let links =
            std::iter::once(("intra", &self.intra)).chain(self.inter.iter().map(|l| ("inter", l)));
        for (which, l) in links {
            let Some(rate) = l.rate_gbps else { continue };
            let why = |p: Proto| {
                format!(
                    "{which} link rate {rate} GB/s per direction x {} payload share {}",
                    p.name(),
                    match p {
                        Proto::Ll => "1/2",
                        Proto::Ll128 => "120/128",
                        Proto::Simple => "1",
                    }
                )
            };
            if which == "intra" {
                for p in Proto::ALL {
                    out.push(Bound {
                        name: format!("{} rate (intra)", p.name()),
                        value: self.proto_gbps(p),
                        bound: rate * p.efficiency(),
                        side: "max",
                        why: why(p),
                    });
                }
            } else {
                out.push(Bound {
                    name: "inter.bw_gbps".into(),
                    value: l.bw_gbps,
                    bound: rate,
                    side: "max",
                    why: why(Proto::Simple),
                });
            }
        }
        if let Some(lat) = p2p_lat_us {
            for a in Algo::ALL {
                for p in Proto::ALL {
                    out.push(Bound {
                        name: format!("intra.hop_lat_us.{}.{}", a.name().to_lowercase(), p.name()),
                        value: self.intra.hop_lat_us.get(a, p),
                        bound: lat,
                        side: "min",
                        why: format!("measured peer-to-peer latency {lat} us"),
                    });
                }
            }
        }
        out
    }

    /// Every rate within its link's ([`Profile::bounds`] without a measured latency): the
    /// broken ones named with their bound, or `Ok` (also where the profile knows no link rate).
    pub(crate) fn check_bounds(&self) -> Result<(), String> {
        let broken: Vec<String> = self
            .bounds(None)
            .into_iter()
            .filter(|b| !b.holds())
            .map(|b| {
                format!(
                    "{} = {:.4} GB/s is past {:.4} ({})",
                    b.name, b.value, b.bound, b.why
                )
            })
            .collect();
        if broken.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{}: no link moves bytes faster than its rate",
            broken.join("; ")
        ))
    }

    /// Every parameter finite, latencies non-negative, bandwidths positive.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut lat = vec![
            self.launch_eager_us.threads,
            self.launch_eager_us.processes,
            self.launch_graph_us,
            self.kernel_launch_eager_us,
        ];
        let mut bw = vec![self.intra.bw_gbps, self.ll_max_gbps, self.hbm_gbps];
        let mut tables = vec![self.base_lat_us, self.intra.hop_lat_us];
        if let Some(n) = &self.inter {
            tables.push(n.hop_lat_us);
            bw.push(n.bw_gbps);
        }
        for t in tables {
            for a in Algo::ALL {
                for p in Proto::ALL {
                    lat.push(t.get(a, p));
                }
            }
        }
        if lat.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err("a latency is negative or not a number".into());
        }
        if bw.iter().any(|x| !x.is_finite() || *x <= 0.0) {
            return Err("a bandwidth is not positive".into());
        }
        if self.gpus_per_node == Some(0) {
            return Err("gpus_per_node must be at least 1".into());
        }
        if let Some(l) = &self.p2p {
            l.check()?;
        }
        Ok(())
    }
}
