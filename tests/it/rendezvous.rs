//! The TCP rendezvous on 127.0.0.1, between threads and between processes.
//!
//! Every server binds port 0 so tests run in parallel. The two-process tests re-run this test
//! binary as the client: `rendezvous_child` (ignored in normal runs) reads its orders from
//! `VB_RDZV_CHILD` and reports on stdout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use verifybench::error::exit_code;
use verifybench::launch::rendezvous::{Client, Endpoint, Hello, Secret, Server, ID_BYTES};

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
        job: None,
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
    let s = Server::bind("127.0.0.1:0".parse().unwrap(), world, hello(0, world), None).unwrap();
    let ep = Endpoint::new("127.0.0.1", s.local_addr().port());
    (s, ep)
}

fn client(
    ep: &Endpoint,
    h: Hello,
    timeout: Duration,
) -> thread::JoinHandle<anyhow::Result<Client>> {
    let ep = ep.clone();
    thread::spawn(move || Client::fetch_id(&ep, &h, None, timeout))
}

#[test]
fn threads_get_the_id_intact_and_rank_0_gathers_their_results() {
    let (mut srv, ep) = server(3);
    let clients: Vec<_> = (1..3)
        .map(|r| {
            let ep = ep.clone();
            thread::spawn(move || {
                let mut c = Client::fetch_id(&ep, &hello(r, 3), None, LONG).unwrap();
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
    let mut srv = Server::bind(addr, 2, hello(0, 2), None).unwrap();
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
    let e = Client::fetch_id(&Endpoint::new("127.0.0.1", 9), &h, None, LONG).unwrap_err();
    assert!(
        e.to_string().contains("rank 0 serves the rendezvous"),
        "{e}"
    );
}

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

fn ranks_that_never_come_time_out_with_their_numbers() {
    let (mut srv, ep) = server(4);
    let c = client(&ep, hello(1, 4), LONG);
    // the deadline it used is in its message ("after 1 s"); no wall-clock ceiling here
    let s = srv.serve_id(&id(), Duration::from_millis(800)).unwrap_err();
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
        None,
        Duration::from_millis(600),
    )
    .unwrap_err()
    .to_string();
    // the deadline it used is in its message; the ceiling (over 30 times the deadline) only
    // catches a rank that ignores it
    assert!(t.elapsed() < LONG, "{:?}", t.elapsed());
    assert!(
        e.contains(&format!(
            "could not reach rank 0 at 127.0.0.1:{port} within 1 s ("
        )),
        "{e}"
    );
    assert!(e.contains("attempts"), "{e}");
}

fn a_rank_waiting_for_missing_peers_gives_up_at_its_timeout() {
    let (mut srv, ep) = server(3);
    // rank 0 serves longer (1 s) than the rank waits (0.3 s); rank 2 never comes
    let s = thread::spawn(move || srv.serve_id(&id(), Duration::from_millis(1000)));
    let e = Client::fetch_id(&ep, &hello(1, 3), None, Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(s.join().unwrap().is_err());
    assert!(
        e.contains("did not hand out the id") && e.contains("all 3 ranks"),
        "{e}"
    );
}

#[test]
fn another_program_on_the_port_is_suspected_when_it_hangs_up() {
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    // a program that hangs up on whoever connects, as a busy port's owner might
    let t = thread::spawn(move || drop(other.accept().unwrap()));
    let e = Client::fetch_id(&Endpoint::new("127.0.0.1", port), &hello(1, 2), None, LONG)
        .unwrap_err()
        .to_string();
    t.join().unwrap();
    assert!(
        e.contains("closed the connection before its challenge") && e.contains("another program"),
        "{e}"
    );
}

#[test]
fn a_port_in_use_is_a_clear_usage_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let e = Server::bind(addr, 2, hello(0, 2), None).unwrap_err();
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

// ---- who may join: the run's secret ---------------------------------------------------------

/// The secret of the runs below; `WRONG` differs from it in its last byte only.
const TOKEN: &[u8] = b"rdv-secret-7c41e0a9d2b35f68";
const WRONG: &[u8] = b"rdv-secret-7c41e0a9d2b35f69";

fn secret(t: &[u8]) -> Secret {
    Secret::new(t, "test").unwrap()
}

fn secured(world: usize, job: Option<&str>) -> (Server, Endpoint) {
    let h = hello(0, world).in_job(job.map(String::from));
    let s = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        world,
        h,
        Some(secret(TOKEN)),
    )
    .unwrap();
    let ep = Endpoint::new("127.0.0.1", s.local_addr().port());
    (s, ep)
}

/// Frame kinds of the protocol, as the wire carries them.
const HELLO: u8 = 1;
const ID: u8 = 2;
const REFUSED: u8 = 3;
const CHALLENGE: u8 = 8;

/// A frame written by hand: "VBRZ", protocol 3, the kind, the length, the payload.
fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = b"VBRZ\x00\x03".to_vec();
    f.push(kind);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A hello's payload written by hand: the proof's length and the proof, 32 bytes of the
/// rank's nonce, the hello's JSON.
fn sealed(proof: Option<[u8; 32]>, json: &[u8]) -> Vec<u8> {
    let mut p = match proof {
        Some(m) => [&[32u8][..], &m].concat(),
        None => vec![0],
    };
    p.extend_from_slice(&[0x5C; 32]);
    p.extend_from_slice(json);
    p
}

/// Reads one frame off the wire by hand: (kind, payload).
fn raw_read(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 11];
    s.read_exact(&mut h).unwrap();
    assert_eq!(&h[..4], b"VBRZ");
    let len = u32::from_be_bytes([h[7], h[8], h[9], h[10]]) as usize;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    (h[6], p)
}

/// The first whole frame of `bytes`, header included, if there is one.
fn first_frame(bytes: &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_be_bytes(bytes.get(7..11)?.try_into().unwrap()) as usize;
    bytes.get(..11 + len).map(|f| f.to_vec())
}

/// Everything a peer sends until it closes the connection (or 5 s pass).
fn rest_of(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = vec![];
    let _ = s.read_to_end(&mut all);
    all
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A TCP relay on 127.0.0.1 to `to` for one connection, keeping every byte that passes:
/// (the relay's endpoint, client-to-server bytes, server-to-client bytes).
type Captured = Arc<Mutex<Vec<u8>>>;
fn relay(to: &Endpoint) -> (Endpoint, Captured, Captured) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = Endpoint::new("127.0.0.1", l.local_addr().unwrap().port());
    let (up, down): (Captured, Captured) = Default::default();
    let (u, d) = (up.clone(), down.clone());
    let target = format!("{}:{}", to.host, to.port);
    thread::spawn(move || {
        let (client, _) = l.accept().unwrap();
        let server = TcpStream::connect(target).unwrap();
        let pump = |mut from: TcpStream, mut to: TcpStream, keep: Captured| {
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 || to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    keep.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
            })
        };
        let a = pump(client.try_clone().unwrap(), server.try_clone().unwrap(), u);
        let b = pump(server, client, d);
        let _ = (a.join(), b.join());
    });
    (ep, up, down)
}

#[test]
fn strangers_without_the_token_or_with_a_wrong_one_get_no_rank_and_the_run_goes_on() {
    let (mut srv, ep) = secured(2, None);
    let srv_thread = thread::spawn(move || {
        let peers = srv.serve_id(&id(), LONG).map_err(|e| e.to_string());
        (peers, srv.refused().to_vec())
    });
    // no token, through the library: refused with a usage error
    let none = Client::fetch_id(&ep, &hello(1, 2), None, LONG).unwrap_err();
    assert_eq!(exit_code(&none), 2, "{none}");
    assert!(
        none.to_string()
            .contains("it gave no token, and this run requires one"),
        "{none}"
    );
    // a wrong token: refused as well
    let wrong = Client::fetch_id(&ep, &hello(1, 2), Some(&secret(WRONG)), LONG);
    let wrong = wrong.unwrap_err();
    assert!(
        wrong
            .to_string()
            .contains("its proof does not match this run's token"),
        "{wrong}"
    );
    // the right rank still joins and gets the id intact
    let right = Client::fetch_id(&ep, &hello(1, 2), Some(&secret(TOKEN)), LONG).unwrap();
    assert_eq!(right.id(), &id());
    let (peers, refused) = srv_thread.join().unwrap();
    let peers = peers.unwrap();
    assert_eq!(peers.len(), 1);
    assert_eq!(
        (peers[0].hello.rank, &peers[0].hello.host),
        (1, &"host1".to_string())
    );
    // rank 0 said who it refused, from which address, and why
    assert_eq!(refused.len(), 2, "{refused:?}");
    for (line, why) in refused.iter().zip(["gave no token", "does not match"]) {
        assert!(
            line.starts_with("refused a connection from 127.0.0.1:")
                && line.contains("claiming rank 1 on host1 (pid 1001)")
                && line.contains(why),
            "{line}"
        );
    }
}

#[test]
fn a_stranger_on_the_wire_never_receives_the_id() {
    let (mut srv, ep) = secured(2, None);
    let srv_thread = thread::spawn(move || srv.serve_id(&id(), LONG).map(|p| p.len()));
    // a hello with a made-up proof, written by hand
    let mut raw = TcpStream::connect((ep.host.as_str(), ep.port)).unwrap();
    let (kind, challenge) = raw_read(&mut raw);
    // 32 bytes of nonce, then 1: this run requires a proof
    assert_eq!((kind, challenge.len(), challenge[32]), (CHALLENGE, 33, 1));
    let json = serde_json::to_vec(&hello(1, 2)).unwrap();
    raw.write_all(&frame(HELLO, &sealed(Some([0xAB; 32]), &json)))
        .unwrap();
    let back = rest_of(&mut raw);
    assert_eq!(back.get(6), Some(&REFUSED), "{back:?}");
    assert!(!contains(&back, &id()), "the stranger received the id");
    // the run goes on: the right rank joins
    let right = Client::fetch_id(&ep, &hello(1, 2), Some(&secret(TOKEN)), LONG).unwrap();
    assert_eq!(right.id(), &id());
    assert_eq!(srv_thread.join().unwrap().unwrap(), 1);
}

#[test]
fn a_replayed_hello_is_refused_and_the_secret_never_travels() {
    let (mut srv, ep) = secured(3, Some("slurm:4711.0"));
    let srv_thread = thread::spawn(move || {
        let peers = srv.serve_id(&id(), LONG).map_err(|e| e.to_string());
        (peers, srv.refused().to_vec())
    });
    // rank 1 joins through a relay that keeps every byte
    let (via, up, down) = relay(&ep);
    let h1 = hello(1, 3).in_job(Some("slurm:4711.0".into()));
    let r1 = thread::spawn(move || Client::fetch_id(&via, &h1, Some(&secret(TOKEN)), LONG));
    let t = Instant::now();
    let hello_frame = loop {
        if let Some(f) = first_frame(&up.lock().unwrap()) {
            break f;
        }
        assert!(t.elapsed() < LONG, "rank 1 never said hello");
        thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(hello_frame[6], HELLO);
    // an eavesdropper replays rank 1's hello, proof and all, on a connection of its own
    let mut replay = TcpStream::connect((ep.host.as_str(), ep.port)).unwrap();
    let (kind, _) = raw_read(&mut replay);
    assert_eq!(kind, CHALLENGE);
    replay.write_all(&hello_frame).unwrap();
    let back = rest_of(&mut replay);
    assert_eq!(back.get(6), Some(&REFUSED), "{back:?}");
    assert!(!contains(&back, &id()), "the replay received the id");
    // the run goes on with the right ranks
    let h2 = hello(2, 3).in_job(Some("slurm:4711.0".into()));
    let r2 = Client::fetch_id(&ep, &h2, Some(&secret(TOKEN)), LONG).unwrap();
    assert_eq!(r2.id(), &id());
    assert_eq!(r1.join().unwrap().unwrap().id(), &id());
    let (peers, refused) = srv_thread.join().unwrap();
    let ranks: Vec<usize> = peers.unwrap().iter().map(|p| p.hello.rank).collect();
    assert_eq!(ranks, vec![1, 2]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("claiming rank 1 on host1")
            && refused[0].contains("a hello replayed from another connection"),
        "{}",
        refused[0]
    );
    // the secret is in no byte that crossed the wire, in either direction, nor in any line
    // rank 0 wrote about the run (as bytes, as hex)
    let hex: String = TOKEN.iter().map(|b| format!("{b:02x}")).collect();
    let wire = [
        up.lock().unwrap().clone(),
        down.lock().unwrap().clone(),
        hello_frame,
        back,
    ];
    assert!(
        wire[0].len() > 11 && wire[1].len() > 11,
        "the relay saw the exchange"
    );
    for bytes in &wire {
        assert!(!contains(bytes, TOKEN), "the secret crossed the wire");
        assert!(
            !contains(bytes, hex.as_bytes()),
            "the secret crossed the wire in hex"
        );
    }
    for line in &refused {
        assert!(
            !contains(line.as_bytes(), TOKEN) && !line.contains(&hex),
            "{line}"
        );
    }
    // the job id does travel: it is no secret
    assert!(contains(&wire[0], b"slurm:4711.0"));
}

#[test]
fn another_jobs_rank_is_refused_and_the_run_goes_on() {
    // an open rendezvous: the launcher's job id alone tells the two jobs apart
    let h0 = hello(0, 2).in_job(Some("torchrun:a".into()));
    let mut srv = Server::bind("127.0.0.1:0".parse().unwrap(), 2, h0, None).unwrap();
    let ep = Endpoint::new("127.0.0.1", srv.local_addr().port());
    let srv_thread = thread::spawn(move || {
        let peers = srv.serve_id(&id(), LONG).map(|p| p.len());
        (peers, srv.refused().to_vec())
    });
    let other = hello(1, 2).in_job(Some("torchrun:b".into()));
    let e = Client::fetch_id(&ep, &other, None, LONG)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("it runs in launcher job torchrun:b, rank 0 in launcher job torchrun:a"),
        "{e}"
    );
    // a rank with a token is refused by a rank 0 without one: the two were set up apart
    let e = Client::fetch_id(
        &ep,
        &hello(1, 2).in_job(Some("torchrun:a".into())),
        Some(&secret(TOKEN)),
        LONG,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("it proves a rendezvous token, but rank 0 has none"),
        "{e}"
    );
    let mine = hello(1, 2).in_job(Some("torchrun:a".into()));
    assert_eq!(
        Client::fetch_id(&ep, &mine, None, LONG).unwrap().id(),
        &id()
    );
    let (peers, refused) = srv_thread.join().unwrap();
    assert_eq!(peers.unwrap(), 1);
    assert_eq!(refused.len(), 2, "{refused:?}");
}

fn refused_connections_are_named_when_the_rendezvous_times_out() {
    let (mut srv, ep) = secured(2, None);
    let c = client(&ep, hello(1, 2), LONG); // no token
    let e = srv
        .serve_id(&id(), Duration::from_millis(1000))
        .unwrap_err()
        .to_string();
    assert!(c.join().unwrap().is_err());
    assert!(
        e.contains("rank 1 of 2 never connected (no rank connected)")
            && e.contains("refused 1 connection (see above)"),
        "{e}"
    );
}

// ---- rank 0 proves the secret too; nobody stalls the rendezvous -------------------------------

/// Waits (at most `LONG`) until `bytes` holds `n` whole frames; returns them.
fn frames_in(bytes: &Captured, n: usize) -> Vec<Vec<u8>> {
    let t = Instant::now();
    loop {
        let all = bytes.lock().unwrap().clone();
        let mut frames = vec![];
        let mut at = 0;
        while let Some(f) = first_frame(&all[at..]) {
            at += f.len();
            frames.push(f);
        }
        if frames.len() >= n {
            return frames;
        }
        assert!(
            t.elapsed() < LONG,
            "only {} frames came: {all:?}",
            frames.len()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_squatter_without_the_token_hands_no_rank_its_id_and_every_rank_names_it() {
    // A program holds the port before rank 0 and plays rank 0 without the token: it
    // challenges each rank, reads its hello and hands it a false id, with a made-up proof (the
    // first rank it meets), with none (the second), or sends a frame far past the handshake's
    // limit (the third).
    let squat = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squat.local_addr().unwrap().port();
    let ep = Endpoint::new("127.0.0.1", port);
    let false_id = [0x5A; ID_BYTES];
    let squatter = thread::spawn(move || {
        for n in 0..3 {
            let (mut s, _) = squat.accept().unwrap();
            if n == 2 {
                let mut huge = frame(CHALLENGE, &[]);
                huge[7..11].copy_from_slice(&(64u32 << 20).to_be_bytes());
                s.write_all(&huge).unwrap();
            } else {
                let mut challenge = vec![0x11; 32];
                challenge.push(1);
                s.write_all(&frame(CHALLENGE, &challenge)).unwrap();
                assert_eq!(raw_read(&mut s).0, HELLO);
                let proof: &[u8] = if n == 0 { &[0xAB; 32] } else { &[] };
                s.write_all(&frame(ID, &[&false_id[..], proof].concat()))
                    .unwrap();
            }
            // until the rank hangs up
            let _ = rest_of(&mut s);
        }
    });
    let ranks: Vec<_> = (1..4)
        .map(|r| {
            let ep = ep.clone();
            thread::spawn(move || Client::fetch_id(&ep, &hello(r, 4), Some(&secret(TOKEN)), LONG))
        })
        .collect();
    let mut errors: Vec<String> = vec![];
    for r in ranks {
        let e = r
            .join()
            .unwrap()
            .expect_err("a rank took the squatter's id");
        assert_eq!(exit_code(&e), 1, "{e}");
        let e = e.to_string();
        assert!(
            e.contains(&format!("rank 0 at 127.0.0.1:{port}")),
            "the squatter's address is not named: {e}"
        );
        errors.push(e);
    }
    squatter.join().unwrap();
    errors.sort();
    let whys = [
        "sent the NCCL id with a proof that does not match this rank's token: whatever answers \
         on that port does not hold this run's token, or replays a proof of another \
         connection; this rank refuses the id",
        "sent the NCCL id without proving the rendezvous token, which this rank requires: \
         whatever answers on that port does not hold this run's token; this rank refuses the id",
        "a 67108864-byte message in the handshake, past its limit of 4096 bytes (not read)",
    ];
    for why in whys {
        assert!(
            errors.iter().any(|e| e.ends_with(why)),
            "no rank said '{why}': {errors:?}"
        );
    }
}

#[test]
fn a_replayed_proof_of_rank_0_is_refused_by_the_rank() {
    // a run of 2 with the token; rank 1 joins through a relay that keeps every byte
    let (mut srv, ep) = secured(2, None);
    let srv_thread = thread::spawn(move || srv.serve_id(&id(), LONG).map(|p| p.len()));
    let (via, _up, down) = relay(&ep);
    let c = Client::fetch_id(&via, &hello(1, 2), Some(&secret(TOKEN)), LONG).unwrap();
    assert_eq!(c.id(), &id());
    assert_eq!(srv_thread.join().unwrap().unwrap(), 1);
    // rank 0's challenge and its id with its proof (128 + 32 bytes), as they crossed the wire
    let frames = frames_in(&down, 2);
    let (challenge, id_frame) = (frames[0].clone(), frames[1].clone());
    assert_eq!((challenge[6], id_frame[6]), (CHALLENGE, ID));
    assert_eq!(id_frame.len(), 11 + ID_BYTES + 32);
    // later, an impostor on another port replays both word for word to the same rank (the
    // same hello, the same token): the rank's own nonce is new, so the proof fails
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_port = fake.local_addr().unwrap().port();
    let impostor = thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        s.write_all(&challenge).unwrap();
        assert_eq!(raw_read(&mut s).0, HELLO);
        s.write_all(&id_frame).unwrap();
        let _ = rest_of(&mut s);
    });
    let e = Client::fetch_id(
        &Endpoint::new("127.0.0.1", fake_port),
        &hello(1, 2),
        Some(&secret(TOKEN)),
        LONG,
    )
    .expect_err("the rank took a replayed id");
    impostor.join().unwrap();
    assert!(
        e.to_string().starts_with(&format!(
            "rank 0 at 127.0.0.1:{fake_port} sent the NCCL id with a proof that does not match \
             this rank's token"
        )),
        "{e}"
    );
}

fn silent_and_slow_connections_do_not_delay_the_ranks_that_speak() {
    // 100 connections that never say a word and one that drips a hello a byte at a time
    // come before the ranks. Each has its own deadline for its hello (10 s); admitted one
    // after another they would need 1,000 s, far past the rendezvous' 60 s. That the run
    // forms within its timeout shows they are admitted side by side.
    let (mut srv, ep) = secured(3, None);
    let srv_thread = thread::spawn(move || {
        let peers = srv.serve_id(&id(), Duration::from_secs(60));
        (peers.map_err(|e| e.to_string()), srv.refused().to_vec())
    });
    let at = (ep.host.clone(), ep.port);
    let silent: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(at.clone()).unwrap())
        .collect();
    let mut drip = TcpStream::connect(at.clone()).unwrap();
    let dripper = thread::spawn(move || {
        drip.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        assert_eq!(raw_read(&mut drip).0, CHALLENGE);
        // a hello of 500 bytes, a byte every 100 ms: 51 s in all, unless rank 0 hangs up
        for b in frame(HELLO, &[b' '; 500]) {
            if drip.write_all(&[b]).is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
    let ranks: Vec<_> = (1..3)
        .map(|r| {
            let ep = ep.clone();
            thread::spawn(move || {
                Client::fetch_id(
                    &ep,
                    &hello(r, 3),
                    Some(&secret(TOKEN)),
                    Duration::from_secs(60),
                )
            })
        })
        .collect();
    for r in ranks {
        assert_eq!(r.join().unwrap().unwrap().id(), &id());
    }
    let (peers, refused) = srv_thread.join().unwrap();
    let ranks: Vec<usize> = peers.unwrap().iter().map(|p| p.hello.rank).collect();
    assert_eq!(ranks, vec![1, 2]);
    // they were strangers, not refused ranks: nothing printed about them
    assert!(refused.is_empty(), "{refused:?}");
    // none of them received the id: at most the challenge, then rank 0 hung up
    for mut s in silent {
        let got = rest_of(&mut s);
        assert!(
            !contains(&got, &id()),
            "a silent connection received the id"
        );
        assert!(got.is_empty() || got[6] == CHALLENGE, "{got:?}");
    }
    dripper.join().unwrap();
}

fn strangers_past_the_rendezvous_timeout_are_counted_not_listed_one_by_one() {
    // 70 silent connections (more than the 64 that may wait at once) and no rank 1: the
    // timeout names the missing rank, a few of the strangers by address, and counts the rest
    let (mut srv, ep) = secured(2, None);
    let srv_thread = thread::spawn(move || srv.serve_id(&id(), Duration::from_secs(3)));
    let silent: Vec<TcpStream> = (0..70)
        .map(|_| TcpStream::connect((ep.host.as_str(), ep.port)).unwrap())
        .collect();
    let e = srv_thread.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("timed out after 3 s: rank 1 of 2 never connected (no rank connected); dropped connections that never said hello: 127.0.0.1:"),
        "{e}"
    );
    // 8 named (a list of 8 has 7 commas between them, and one before the count)
    let list = e.split("never said hello: ").nth(1).unwrap();
    let list = list.split("; check").next().unwrap();
    assert!(list.ends_with(", and 62 more"), "{list}");
    assert_eq!(list.matches(", ").count(), 8, "{list}");
    drop(silent);
}

#[test]
fn an_oversized_frame_before_the_proof_is_refused_unread_and_the_run_goes_on() {
    let (mut srv, ep) = secured(2, None);
    let srv_thread = thread::spawn(move || {
        let peers = srv.serve_id(&id(), LONG).map(|p| p.len());
        (peers, srv.refused().to_vec())
    });
    let mut big = TcpStream::connect((ep.host.as_str(), ep.port)).unwrap();
    let from = big.local_addr().unwrap();
    assert_eq!(raw_read(&mut big).0, CHALLENGE);
    // a hello that announces 10 MiB (its header alone is sent: rank 0 reads nothing more)
    let mut header = frame(HELLO, &[]);
    header[7..11].copy_from_slice(&(10u32 << 20).to_be_bytes());
    big.write_all(&header).unwrap();
    let back = rest_of(&mut big);
    assert_eq!(back.get(6), Some(&REFUSED), "{back:?}");
    assert!(!contains(&back, &id()), "the stranger received the id");
    // the run goes on: the right rank joins
    let right = Client::fetch_id(&ep, &hello(1, 2), Some(&secret(TOKEN)), LONG).unwrap();
    assert_eq!(right.id(), &id());
    let (peers, refused) = srv_thread.join().unwrap();
    assert_eq!(peers.unwrap(), 1);
    // named by its address alone
    assert_eq!(
        refused,
        vec![format!(
            "dropped a connection from {from}: it announced a 10485760-byte hello, past the \
             4096-byte limit of a hello before its proof (not read)"
        )]
    );
}

#[test]
fn what_a_stranger_claims_is_printed_escaped_and_cut() {
    let (mut srv, ep) = secured(2, None);
    let srv_thread = thread::spawn(move || {
        let peers = srv.serve_id(&id(), LONG).map(|p| p.len());
        (peers, srv.refused().to_vec())
    });
    // a hello with a wrong proof, claiming a host name that clears the terminal, starts a
    // line of its own and runs on for 3,000 bytes
    let mut h = hello(1, 2);
    h.host = format!(
        "h\u{1b}[2J\nverifybench rendezvous: all ranks joined{}",
        "x".repeat(3000)
    );
    let json = serde_json::to_vec(&h).unwrap();
    let mut raw = TcpStream::connect((ep.host.as_str(), ep.port)).unwrap();
    assert_eq!(raw_read(&mut raw).0, CHALLENGE);
    raw.write_all(&frame(HELLO, &sealed(Some([0xCD; 32]), &json)))
        .unwrap();
    let back = rest_of(&mut raw);
    assert_eq!(back.get(6), Some(&REFUSED), "{back:?}");
    let right = Client::fetch_id(&ep, &hello(1, 2), Some(&secret(TOKEN)), LONG).unwrap();
    assert_eq!(right.id(), &id());
    let (peers, refused) = srv_thread.join().unwrap();
    assert_eq!(peers.unwrap(), 1);
    assert_eq!(refused.len(), 1, "{refused:?}");
    let line = &refused[0];
    assert!(
        line.contains(
            "claiming rank 1 on h\\u{1b}[2J\\nverifybench rendezvous: all ranks joinedxxx"
        ),
        "{line}"
    );
    // cut at 256 characters, with the length of the whole name: 1 + 1 (ESC) + 3 + 1 (newline)
    // + 40 + 3,000 = 3,046 bytes
    assert!(
        line.contains("x... (3046 bytes in all) (pid 1001)"),
        "{line}"
    );
    assert!(!line.chars().any(char::is_control), "{line}");
    assert!(line.len() < 600, "{} bytes: {line}", line.len());
}

#[test]
fn a_malformed_hello_in_an_open_rendezvous_is_dropped_and_named_and_the_run_goes_on() {
    let (mut srv, ep) = server(2);
    let srv_thread = thread::spawn(move || {
        let peers = srv.serve_id(&id(), LONG).map_err(|e| e.to_string());
        (peers, srv.refused().to_vec())
    });
    let connect = || TcpStream::connect((ep.host.as_str(), ep.port)).unwrap();
    // a hello laid out as this build's, whose JSON is not a hello
    let mut bad = connect();
    let bad_from = bad.local_addr().unwrap();
    let (kind, challenge) = raw_read(&mut bad);
    // 32 bytes of nonce, then 0: this run requires no proof
    assert_eq!((kind, challenge.len(), challenge[32]), (CHALLENGE, 33, 0));
    let json = br#"{"host":"\u001b]0;owned\u0007","rank":1}"#;
    bad.write_all(&frame(HELLO, &sealed(None, json))).unwrap();
    let back = rest_of(&mut bad);
    assert_eq!(back.get(6), Some(&REFUSED), "{back:?}");
    // bytes that are no frame at all (as many as a header: rank 0 reads them all, so its
    // refusal is not lost to a reset)
    let mut junk = connect();
    let junk_from = junk.local_addr().unwrap();
    assert_eq!(raw_read(&mut junk).0, CHALLENGE);
    junk.write_all(b"\x1b[2J GET /\n").unwrap();
    let back = rest_of(&mut junk);
    assert_eq!(back.get(6), Some(&REFUSED), "{back:?}");
    // the run goes on with the rank that speaks the protocol
    let right = client(&ep, hello(1, 2), LONG);
    assert_eq!(right.join().unwrap().unwrap().id(), &id());
    let (peers, refused) = srv_thread.join().unwrap();
    assert_eq!(peers.unwrap().len(), 1);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused[0].starts_with(&format!(
            "dropped a connection from {bad_from}: its hello is not one this build can read \
             (missing field `version`"
        )),
        "{}",
        refused[0]
    );
    assert_eq!(
        refused[1],
        format!(
            "dropped a connection from {junk_from}: it is no verifybench rank (it sent \"\\u{{1b}}[2J\")"
        )
    );
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
    let mut c = Client::fetch_id(&ep, &h, None, LONG).map_err(|e| format!("CHILD-ERR {e}"))?;
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

fn two_processes_time_out_naming_the_rank_that_never_came() {
    let (mut srv, ep) = server(3);
    let child = spawn_child(&child_orders(ep.port, 1, 3, "2b1b0000aaaa0001"));
    // long enough for the child (this test binary run again) to start and connect
    let s = srv
        .serve_id(&id(), Duration::from_millis(2500))
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

/// The rendezvous' cases that wait for a timeout or a late peer (up to 3 s each, 10 s one after
/// the other), run side by side: each is a case of its own, named when it fails. The two cases
/// that free a port and count on nobody taking it stay tests of their own: beside eight
/// servers binding ports they lost it.
#[test]
fn timeouts_and_late_peers_side_by_side() {
    crate::common::side_by_side(&[
        (
            "strangers_past_the_rendezvous_timeout_are_counted_not_listed_one_by_one",
            strangers_past_the_rendezvous_timeout_are_counted_not_listed_one_by_one,
        ),
        (
            "two_processes_time_out_naming_the_rank_that_never_came",
            two_processes_time_out_naming_the_rank_that_never_came,
        ),
        (
            "refused_connections_are_named_when_the_rendezvous_times_out",
            refused_connections_are_named_when_the_rendezvous_times_out,
        ),
        (
            "a_rank_waiting_for_missing_peers_gives_up_at_its_timeout",
            a_rank_waiting_for_missing_peers_gives_up_at_its_timeout,
        ),
        (
            "ranks_that_never_come_time_out_with_their_numbers",
            ranks_that_never_come_time_out_with_their_numbers,
        ),
        (
            "gather_names_ranks_that_failed_or_sent_nothing",
            gather_names_ranks_that_failed_or_sent_nothing,
        ),
        (
            "silent_and_slow_connections_do_not_delay_the_ranks_that_speak",
            silent_and_slow_connections_do_not_delay_the_ranks_that_speak,
        ),
        (
            "a_duplicate_rank_is_refused_and_the_first_one_is_told",
            a_duplicate_rank_is_refused_and_the_first_one_is_told,
        ),
    ]);
}

// ---- the worker's command line ---------------------------------------------------------------

/// A worker of rank 0 of 2 on a port nobody uses, with `args` after.
fn worker(args: &[&str]) -> assert_cmd::Command {
    let mut c = crate::common::vb();
    c.args(["worker", "--rank", "0", "--world-size", "2"])
        .args(["--rendezvous", "127.0.0.1:9"])
        .args(args)
        .env_remove("VERIFYBENCH_RENDEZVOUS_TOKEN");
    c
}

/// Runs `c` and returns its stderr after checking it exited 2 and its last line holds `want`
/// and nothing of a GPU, a driver or NCCL: a refusal made before start-up.
fn refused_before_start(mut c: assert_cmd::Command, want: &str) -> String {
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap_or("");
    assert!(last.contains(want), "'{last}' lacks '{want}' ({err})");
    for device in ["needs a GPU", "GPU found", "CUDA", "NCCL", "libnccl"] {
        assert!(!err.contains(device), "{err}");
    }
    err
}

#[test]
fn the_workers_refusals_come_before_start_up() {
    let dir = tempfile::tempdir().unwrap();
    refused_before_start(worker(&["--tp", "0"]), "--tp 0: give 1 to 1024 ranks");
    refused_before_start(
        worker(&["--tp", "4"]),
        "--tp 4 but the launcher started 2 ranks: make them equal",
    );
    let long = dir.path().join("long.json");
    crate::common::long_schedule(&long, 117_650);
    refused_before_start(
        worker(&["--schedule", long.to_str().unwrap()]),
        "the exact check gives distinct inputs to at most 117649 operations of one schedule \
         (3 buffer slots each), and this one has 117650",
    );
    // a token file that others may read: named, with the command that mends it
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{}\n", String::from_utf8_lossy(TOKEN))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let t = token.display().to_string();
    let err = refused_before_start(
        worker(&["--rendezvous-token-file", &t]),
        &format!(
            "--rendezvous-token-file '{t}' has mode 0644, so other users can reach the token: \
             run `chmod 600 '{t}'`"
        ),
    );
    assert!(
        !contains(err.as_bytes(), TOKEN),
        "the token was printed: {err}"
    );
    // an empty token in the environment is refused, not taken for "no token"
    let mut c = worker(&[]);
    c.env("VERIFYBENCH_RENDEZVOUS_TOKEN", "");
    refused_before_start(
        c,
        "VERIFYBENCH_RENDEZVOUS_TOKEN (from the environment) is empty",
    );
    let mut c = worker(&[]);
    c.env("VERIFYBENCH_RENDEZVOUS_TOKEN", "short");
    let err = refused_before_start(c, "a token of 5 bytes: use at least 16");
    assert!(!err.contains("short"), "the token was printed: {err}");
}

/// On a machine with a GPU (and NCCL) the worker reaches its rendezvous: rank 0 whose peer
/// never comes ends at `--timeout`, naming the missing rank and the deadline it used, and says
/// its rendezvous is open; with a token, it says so, and the token is in no line it prints.
/// It needs a GPU, so it is ignored in a plain `cargo test` (which lists it as ignored) and run
/// with `cargo test --test it rendezvous -- --ignored` on a GPU machine, where a missing GPU
/// fails it. Without a GPU the same timing is checked on the rendezvous itself, as the worker
/// waits (`launch::external_worker`'s tests).
#[test]
#[ignore = "needs a GPU and NCCL: run with -- --ignored on a GPU machine"]
fn a_worker_whose_peer_never_comes_ends_at_its_timeout() {
    assert!(
        verifybench::comm::device_count() > 0,
        "this test needs a GPU and found none: it was not skipped silently, it failed"
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rdv = format!("127.0.0.1:{port}");
    let t = Instant::now();
    let out = crate::common::vb()
        .args([
            "worker",
            "--rank",
            "0",
            "--world-size",
            "2",
            "--rendezvous",
            &rdv,
        ])
        .args(["--tp", "2", "--timeout", "3"])
        .env_remove("VERIFYBENCH_RENDEZVOUS_TOKEN")
        .output()
        .unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // the deadline is in the message below; the ceiling (10 times it) catches a hang only
    assert!(took < Duration::from_secs(30), "{took:?}: {err}");
    assert!(
        err.contains("timed out after 3 s: rank 1 of 2 never connected"),
        "{err}"
    );
    assert!(
        err.contains(&format!("the rendezvous at {rdv} is open to any host")),
        "{err}"
    );
    let out = crate::common::vb()
        .args([
            "worker",
            "--rank",
            "0",
            "--world-size",
            "2",
            "--rendezvous",
            &rdv,
        ])
        .args(["--tp", "2", "--timeout", "2"])
        .env(
            "VERIFYBENCH_RENDEZVOUS_TOKEN",
            String::from_utf8_lossy(TOKEN).as_ref(),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("admits only ranks that prove the token of VERIFYBENCH_RENDEZVOUS_TOKEN"),
        "{err}"
    );
    assert!(
        !contains(&out.stderr, TOKEN) && !contains(&out.stdout, TOKEN),
        "{err}"
    );
}
