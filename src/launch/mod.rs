//! Starting ranks: external launchers (torchrun, Slurm, MPI) and the TCP rendezvous that hands
//! them the NCCL unique id.

pub mod external;
pub mod rendezvous;
