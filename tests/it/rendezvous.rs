//! The TCP rendezvous on 127.0.0.1, between threads and between processes.
//!
//! Every server binds port 0 so tests run in parallel. The two-process tests re-run this test
//! binary as the client: `rendezvous_child` (ignored in normal runs) reads its orders from
//! `VB_RDZV_CHILD` and reports on stdout.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use verifybench::error::exit_code;
use verifybench::launch::rendezvous::{Client, Endpoint, Hello, Server, ID_BYTES};

const LONG: Duration = Duration::from_secs(20);
const CHILD_VAR: &str = "VB_RDZV_CHILD";

fn hello(rank: usize, world: usize) -> Hello {
    Hello {
        version: "0.1.0".into(),
        workload_hash: "2b1b0000aaaa0001".into(),
        rank,
        world_size: world,
        host: format!("host{rank}"),
        pid: 1000 + rank as u32,
    }
}

fn id() -> [u8; ID_BYTES] {
    let mut id = [0u8; ID_BYTES];
    for (i, b) in id.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    id
}

fn server(world: usize) -> (Server, Endpoint) {
    let s = Server::bind("127.0.0.1:0".parse().unwrap(), world, hello(0, world)).unwrap();
    let ep = Endpoint::new("127.0.0.1", s.local_addr().port());
    (s, ep)
}

fn client(
    ep: &Endpoint,
    h: Hello,
    timeout: Duration,
) -> thread::JoinHandle<anyhow::Result<Client>> {
    let ep = ep.clone();
    thread::spawn(move || Client::fetch_id(&ep, &h, timeout))
}

#[test]
fn threads_get_the_id_intact_and_rank_0_gathers_their_results() {
    let (mut srv, ep) = server(3);
    let clients: Vec<_> = (1..3)
        .map(|r| {
            let ep = ep.clone();
            thread::spawn(move || {
                let mut c = Client::fetch_id(&ep, &hello(r, 3), LONG).unwrap();
                assert_eq!(c.id(), &id());
                c.send_result(format!("timings of rank {r}").as_bytes(), LONG)
                    .unwrap();
            })
        })
        .collect();
    let peers = srv.serve_id(&id(), LONG).unwrap();
    let ranks: Vec<usize> = peers.iter().map(|p| p.hello.rank).collect();
    assert_eq!(ranks, vec![1, 2]);
    assert_eq!(peers[1].hello.host, "host2");
    let got = srv.gather(LONG).unwrap();
    assert_eq!(
        got,
        vec![
            (1, b"timings of rank 1".to_vec()),
            (2, b"timings of rank 2".to_vec())
        ]
    );
    for c in clients {
        c.join().unwrap();
    }
}

#[test]
fn a_rank_started_before_rank_0_retries_until_it_listens() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ep = Endpoint::new("127.0.0.1", port);
    let c = client(&ep, hello(1, 2), LONG);
    thread::sleep(Duration::from_millis(400));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut srv = Server::bind(addr, 2, hello(0, 2)).unwrap();
    srv.serve_id(&id(), LONG).unwrap();
    assert_eq!(c.join().unwrap().unwrap().id(), &id());
}

/// Runs a world of `world` with one client `h`; returns (server error, client error).
fn refused(world: usize, h: Hello) -> (anyhow::Error, anyhow::Error) {
    let (mut srv, ep) = server(world);
    let c = client(&ep, h, LONG);
    let s = srv.serve_id(&id(), LONG).unwrap_err();
    let c = c.join().unwrap().unwrap_err();
    (s, c)
}

#[test]
fn another_version_is_refused_and_both_sides_say_why() {
    let mut h = hello(1, 2);
    h.version = "0.2.0".into();
    let (s, c) = refused(2, h);
    let want = "rank 1 on host1 runs verifybench 0.2.0 with workload 2b1b0000aaaa0001, \
                rank 0 on host0 runs 0.1.0 with workload 2b1b0000aaaa0001: \
                start every rank with the same binary and flags";
    assert_eq!(s.to_string(), want);
    assert!(c.to_string().contains(want), "{c}");
    assert!(c.to_string().starts_with("rank 0 at 127.0.0.1:"), "{c}");
    assert_eq!((exit_code(&s), exit_code(&c)), (2, 2));
}

#[test]
fn another_workload_is_refused() {
    let mut h = hello(1, 2);
    h.workload_hash = "9f3c000000000000".into();
    let (s, c) = refused(2, h);
    assert!(
        s.to_string()
            .contains("with workload 9f3c000000000000, rank 0 on host0"),
        "{s}"
    );
    assert!(
        c.to_string().contains("with workload 9f3c000000000000"),
        "{c}"
    );
}

#[test]
fn another_world_size_is_refused() {
    let (s, c) = refused(2, hello(1, 3));
    let want = "rank 1 on host1 was started with world size 3, rank 0 on host0 with world size 2";
    assert!(s.to_string().contains(want), "{s}");
    assert!(c.to_string().contains(want), "{c}");
}

#[test]
fn a_client_cannot_claim_rank_0() {
    let mut h = hello(0, 2);
    h.host = "hostB".into();
    h.pid = 7;
    // Rank 0 serves; a second process that thinks it is rank 0 learns it before connecting.
    let e = Client::fetch_id(&Endpoint::new("127.0.0.1", 9), &h, LONG).unwrap_err();
    assert!(
        e.to_string().contains("rank 0 serves the rendezvous"),
        "{e}"
    );
}

#[test]
fn a_duplicate_rank_is_refused_and_the_first_one_is_told() {
    let (mut srv, ep) = server(3);
    let first = client(&ep, hello(1, 3), LONG);
    let srv_thread = thread::spawn(move || srv.serve_id(&id(), LONG).map(|_| ()));
    thread::sleep(Duration::from_millis(400));
    let mut dup = hello(1, 3);
    dup.host = "hostX".into();
    dup.pid = 5;
    let second = client(&ep, dup, LONG);
    let s = srv_thread.join().unwrap().unwrap_err();
    let want = "rank 1 on hostX (pid 5) duplicates rank 1 on host1 (pid 1001): give each process its own rank";
    assert_eq!(s.to_string(), want);
    assert_eq!(exit_code(&s), 2);
    let second = second.join().unwrap().unwrap_err().to_string();
    assert!(
        second.contains("refused rank 1 on hostX") && second.contains(want),
        "{second}"
    );
    let first = first.join().unwrap().unwrap_err().to_string();
    assert!(
        first.contains("ended the rendezvous") && first.contains(want),
        "{first}"
    );
}

#[test]
fn a_rank_out_of_range_is_refused() {
    let (s, c) = refused(2, hello(5, 2));
    assert!(
        s.to_string().contains("rank 5 on host5 is out of range"),
        "{s}"
    );
    assert!(c.to_string().contains("a world of 2 ranks (0-1)"), "{c}");
}

#[test]
fn ranks_that_never_come_time_out_with_their_numbers() {
    let (mut srv, ep) = server(4);
    let c = client(&ep, hello(1, 4), LONG);
    let t = Instant::now();
    let s = srv.serve_id(&id(), Duration::from_millis(800)).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5));
    let msg = s.to_string();
    assert!(
        msg.contains("timed out after 1 s: ranks 2, 3 of 4 never connected (joined: rank 1 on host1 pid 1001)"),
        "{msg}"
    );
    // The rank that came is told, instead of waiting for its own timeout.
    let c = c.join().unwrap().unwrap_err().to_string();
    assert!(c.contains("ranks 2, 3 of 4 never connected"), "{c}");
}

#[test]
fn a_rank_with_nobody_listening_gives_up_at_its_timeout() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = Instant::now();
    let e = Client::fetch_id(
        &Endpoint::new("127.0.0.1", port),
        &hello(1, 2),
        Duration::from_millis(600),
    )
    .unwrap_err()
    .to_string();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        e.contains(&format!("could not reach rank 0 at 127.0.0.1:{port}")),
        "{e}"
    );
    assert!(e.contains("attempts"), "{e}");
}

#[test]
fn a_rank_waiting_for_missing_peers_gives_up_at_its_timeout() {
    let (_srv, ep) = server(3); // listens, never serves
    let e = Client::fetch_id(&ep, &hello(1, 3), Duration::from_millis(500))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("did not hand out the id") && e.contains("all 3 ranks"),
        "{e}"
    );
}

#[test]
fn another_program_on_the_port_is_suspected_when_it_hangs_up() {
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    let t = thread::spawn(move || {
        use std::io::Read;
        let (mut s, _) = other.accept().unwrap();
        let mut buf = [0u8; 16];
        let _ = s.read(&mut buf);
    });
    let e = Client::fetch_id(&Endpoint::new("127.0.0.1", port), &hello(1, 2), LONG)
        .unwrap_err()
        .to_string();
    t.join().unwrap();
    assert!(
        e.contains("closed the connection before sending the id") && e.contains("another program"),
        "{e}"
    );
}

#[test]
fn a_port_in_use_is_a_clear_usage_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let e = Server::bind(addr, 2, hello(0, 2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "port {} on 127.0.0.1 is in use: pick another --rendezvous port or stop the process holding it",
            addr.port()
        )
    );
    assert_eq!(exit_code(&e), 2);
}

#[test]
fn a_stranger_on_the_port_does_not_stop_the_rendezvous() {
    let (mut srv, ep) = server(2);
    let port = ep.port;
    let stranger = thread::spawn(move || {
        use std::io::Write;
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        thread::sleep(Duration::from_millis(200));
    });
    thread::sleep(Duration::from_millis(100));
    let c = client(&ep, hello(1, 2), LONG);
    srv.serve_id(&id(), LONG).unwrap();
    assert_eq!(c.join().unwrap().unwrap().id(), &id());
    stranger.join().unwrap();
}

#[test]
fn gather_names_ranks_that_failed_or_sent_nothing() {
    let (mut srv, ep) = server(3);
    let c1 = client(&ep, hello(1, 3), LONG);
    let c2 = client(&ep, hello(2, 3), LONG);
    srv.serve_id(&id(), LONG).unwrap();
    let mut c1 = c1.join().unwrap().unwrap();
    let c2 = c2.join().unwrap().unwrap();
    c1.send_failure("CUDA error: out of memory", LONG).unwrap();
    let e = srv
        .gather(Duration::from_millis(500))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank 1 on host1 failed: CUDA error: out of memory"),
        "{e}"
    );
    assert!(
        e.contains("rank 2 on host2 sent no result within 1 s"),
        "{e}"
    );
    drop(c2);
}

#[test]
fn rank_0_abort_reaches_a_rank_waiting_for_its_ack() {
    let (mut srv, ep) = server(2);
    let c = client(&ep, hello(1, 2), LONG);
    srv.serve_id(&id(), LONG).unwrap();
    let mut c = c.join().unwrap().unwrap();
    srv.abort("NCCL init failed");
    let e = c.send_result(b"x", LONG).unwrap_err().to_string();
    assert_eq!(e, "rank 0 on host0 failed: NCCL init failed");
}

// ---- two processes -------------------------------------------------------------------------

/// Orders for the child: `PORT RANK WORLD WORKLOAD`.
fn child_orders(port: u16, rank: usize, world: usize, workload: &str) -> String {
    format!("{port} {rank} {world} {workload}")
}

fn spawn_child(orders: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "rendezvous::rendezvous_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_VAR, orders)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The client half: fetch the id, print it, send it back as the result.
fn child_main(orders: &str) -> Result<(), String> {
    let f: Vec<&str> = orders.split_whitespace().collect();
    let port: u16 = f[0].parse().unwrap();
    let (rank, world): (usize, usize) = (f[1].parse().unwrap(), f[2].parse().unwrap());
    let mut h = Hello::here(f[3], rank, world);
    h.version = "0.1.0".into();
    let ep = Endpoint::new("127.0.0.1", port);
    let mut c = Client::fetch_id(&ep, &h, LONG).map_err(|e| format!("CHILD-ERR {e}"))?;
    println!("CHILD-ID {}", hex(c.id()));
    let mut result = format!("pid {} id ", std::process::id()).into_bytes();
    result.extend_from_slice(c.id());
    c.send_result(&result, LONG)
        .map_err(|e| format!("CHILD-ERR {e}"))?;
    Ok(())
}

#[test]
#[ignore = "client half of the two-process tests; they run it"]
fn rendezvous_child() {
    match std::env::var(CHILD_VAR) {
        Ok(orders) => {
            if let Err(e) = child_main(&orders) {
                println!("{e}");
                std::process::exit(3);
            }
        }
        // Run by hand: play both halves in this process.
        Err(_) => {
            let (mut srv, ep) = server(2);
            let t = thread::spawn(move || {
                srv.serve_id(&id(), LONG).unwrap();
                srv.gather(LONG).unwrap()
            });
            child_main(&child_orders(ep.port, 1, 2, "2b1b0000aaaa0001")).unwrap();
            let got = t.join().unwrap();
            assert!(got[0].1.ends_with(&id()));
        }
    }
}

#[test]
fn two_processes_hand_over_the_id_intact_and_gather_the_result() {
    let (mut srv, ep) = server(2);
    let child = spawn_child(&child_orders(ep.port, 1, 2, "2b1b0000aaaa0001"));
    let peers = srv.serve_id(&id(), LONG).unwrap();
    let got = srv.gather(LONG).unwrap();
    let out = child.wait_with_output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains(&format!("CHILD-ID {}", hex(&id()))), "{t}");
    // The child is another process: its pid in the hello and in its result is not ours.
    assert_ne!(peers[0].hello.pid, std::process::id());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 1);
    let want = format!("pid {} id ", peers[0].hello.pid);
    assert!(got[0].1.starts_with(want.as_bytes()));
    assert!(got[0].1.ends_with(&id()));
}

#[test]
fn two_processes_with_different_workloads_are_refused_on_both_sides() {
    let (mut srv, ep) = server(2);
    let child = spawn_child(&child_orders(ep.port, 1, 2, "9f3c000000000000"));
    let s = srv.serve_id(&id(), LONG).unwrap_err().to_string();
    let out = child.wait_with_output().unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        s.contains("runs verifybench 0.1.0 with workload 9f3c000000000000, rank 0 on host0"),
        "{s}"
    );
    assert!(
        t.contains(&format!(
            "CHILD-ERR rank 0 at 127.0.0.1:{} refused rank 1",
            ep.port
        )),
        "{t}"
    );
    assert!(t.contains("with workload 9f3c000000000000, rank 0 on host0 runs 0.1.0 with workload 2b1b0000aaaa0001"), "{t}");
}

#[test]
fn two_processes_time_out_naming_the_rank_that_never_came() {
    let (mut srv, ep) = server(3);
    let child = spawn_child(&child_orders(ep.port, 1, 3, "2b1b0000aaaa0001"));
    let s = srv
        .serve_id(&id(), Duration::from_secs(5))
        .unwrap_err()
        .to_string();
    let out = child.wait_with_output().unwrap();
    let t = text(&out);
    assert!(s.contains("rank 2 of 3 never connected"), "{s}");
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        t.contains("ended the rendezvous") && t.contains("rank 2 of 3 never connected"),
        "{t}"
    );
}
