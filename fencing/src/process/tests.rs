//! Process identity: /proc stat and mountinfo parsing, boot and machine ids, where a
//! target runs, the files and ports a process holds; against this host's own processes.

use super::*;

/// A `/proc/PID/stat` text as procfs parses it.
fn parse_stat(text: &str) -> Option<ProcStat> {
    use procfs::FromRead;
    ProcStat::of(&procfs::process::Stat::from_read(text.as_bytes()).ok()?)
}

#[test]
fn mountinfo_lines_give_device_root_and_point_with_escapes_undone() {
    let text = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                40 36 0:52 /srv/my\\040data /data\\134x rw - ext4 /dev/sda1 rw\n\
                garbage\n\
                41 36 8:x / /y rw - ext4 /dev/sda1 rw\n";
    assert_eq!(
        parse_mountinfo(text),
        vec![
            Mount {
                dev: (98, 0),
                root: PathBuf::from("/mnt1"),
                point: PathBuf::from("/mnt2"),
            },
            Mount {
                dev: (0, 52),
                root: PathBuf::from("/srv/my data"),
                point: PathBuf::from("/data\\x"),
            },
        ]
    );
    // A backslash without three octal digits, or past a byte, is kept as it is.
    assert_eq!(
        unescape_mount_path("a\\9b\\777"),
        PathBuf::from("a\\9b\\777")
    );
}

#[test]
fn this_process_sees_its_own_file_and_its_place_in_the_filesystem() {
    let dir = std::env::temp_dir().join(format!("warden-sees-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("service.pid");
    fs::write(&file, "1\n").unwrap();
    let key = FileKey::of(&fs::metadata(&file).unwrap());
    let me = std::process::id();
    assert!(sees_file(me, &file, key));
    // Through the mounts too: its place in the filesystem, from a mount of it.
    assert!(place_in_filesystem(&file, key).is_some());
    let other = dir.join("other");
    fs::write(&other, "2\n").unwrap();
    assert!(!sees_file(me, &other, key), "another file is not this one");
    assert!(
        !sees_file(me, Path::new("service.pid"), key),
        "a relative path"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stat_fields_are_counted_after_the_last_parenthesis() {
    // comm may hold spaces and parentheses: "(a) (b c)".
    let text = "4242 ((a) (b c)) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                987654 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0";
    let s = parse_stat(text).unwrap();
    assert_eq!(
        s,
        ProcStat {
            state: 'S',
            ppid: 1,
            pgid: 4240,
            start_time: 987654
        }
    );
    assert!(!s.is_exited());
}

#[test]
fn zombie_and_dead_states_count_as_exited() {
    // A zombie's stat as Linux 6.1 shows it.
    let zombie = "7 (x) Z 1 7 7 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0 \
                  18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0";
    assert!(parse_stat(zombie).unwrap().is_exited());
    let dead = zombie.replacen(" Z ", " X ", 1);
    assert!(parse_stat(&dead).unwrap().is_exited());
}

#[test]
fn truncated_stat_is_rejected() {
    assert_eq!(parse_stat("7 (x) S 1 7"), None);
    assert_eq!(parse_stat("garbage"), None);
}

#[test]
fn listen_inodes_match_port_and_listen_state_only() {
    let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 100 0 0 10 0
";
    let parse = |text: &str| {
        use procfs::FromBufReadSI;
        procfs::net::TcpNetEntries::from_buf_read(text.as_bytes(), procfs::current_system_info())
            .unwrap()
            .0
    };
    let tcp = parse(tcp);
    assert_eq!(listen_inodes(&tcp, 8080), vec![111]);
    assert_eq!(listen_inodes(&tcp, 8081), vec![333]);
    assert!(listen_inodes(&tcp, 22).is_empty());
    let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 100 0 0 10 0
";
    assert_eq!(listen_inodes(&parse(tcp6), 8080), vec![444]);
}

#[test]
fn boot_ids_parse_bare_or_dashed_in_either_case_and_nothing_else() {
    let id = parse_boot_id("ea6e745e-35d0-4857-9b07-fa79425460ee").unwrap();
    assert_eq!(
        parse_boot_id("EA6E745E-35D0-4857-9B07-FA79425460EE"),
        Some(id)
    );
    assert_eq!(parse_boot_id("ea6e745e35d048579b07fa79425460ee"), Some(id));
    assert_eq!(
        parse_boot_id(" ea6e745e-35d0-4857-9b07-fa79425460ee\n"),
        Some(id)
    );
    for bad in [
        "",
        "b-1",
        "ea6e745e-35d0-4857-9b07-fa79425460e",
        "ea6e745e-35d0-4857-9b07-fa79425460eg",
        "ea6e745e35d0-4857-9b07-fa79425460ee-",
        "+a6e745e-35d0-4857-9b07-fa79425460ee",
        "ea6e745e-35d0-4857-9b07-fa79425460ee0",
    ] {
        assert_eq!(parse_boot_id(bad), None, "{bad:?}");
    }
    let m = parse_machine_id("3d1219c7c4c5404aaa1f6d2a48adfda4").unwrap();
    assert_eq!(
        parse_machine_id("3D1219C7C4C5404AAA1F6D2A48ADFDA4"),
        Some(m)
    );
    assert_eq!(
        parse_machine_id("3d1219c7-c4c5-404a-aa1f-6d2a48adfda4"),
        None
    );
    assert_eq!(parse_machine_id("uninitialized"), None);
}

#[test]
fn a_cgroup_recorded_in_another_cgroup_namespace_is_out_of_view() {
    let here = cgroup::namespace().expect("/proc/self/ns/cgroup");
    let t = |ns: Option<u64>, pid_ns: Option<u64>| Target {
        service_cgroup: Some("/warden/service-1".into()),
        cgroup_ns: ns,
        pid_ns,
        ..Target::default()
    };
    assert_eq!(
        cgroup_out_of_view(&t(Some(here), None), "/warden/service-1"),
        None
    );
    let why = cgroup_out_of_view(&t(Some(here + 1), None), "/warden/service-1")
        .expect("another cgroup namespace");
    assert!(
        why.contains("cgroup namespace") && why.contains("never taken for removed"),
        "{why}"
    );
    // An older warden's record: trusted only between the host's initial namespaces.
    let old = t(None, Some(INITIAL_PID_NAMESPACE));
    assert_eq!(
        cgroup_out_of_view(&old, "/warden/service-1").is_none(),
        here == cgroup::INITIAL_NAMESPACE
    );
    assert!(cgroup_out_of_view(&t(None, Some(4026532000)), "/warden/service-1").is_some());
}

#[test]
fn whereabouts_needs_boot_machine_and_pid_namespace_to_agree() {
    const BOOT: &str = "ea6e745e-35d0-4857-9b07-fa79425460ee";
    const OTHER_BOOT: &str = "00000000-0000-4000-8000-000000000000";
    const MACHINE: &str = "3d1219c7c4c5404aaa1f6d2a48adfda4";
    const OTHER_MACHINE: &str = "11111111111111111111111111111111";
    let t = |boot: Option<&str>, machine: Option<&str>, ns: Option<u64>| Target {
        boot_id: boot.map(str::to_string),
        machine_id: machine.map(str::to_string),
        pid_ns: ns,
        ..Target::default()
    };
    let here = |target: &Target| whereabouts(BOOT, MACHINE, 7, target);
    let elsewhere = |w: Whereabouts, why: &str| match w {
        Whereabouts::Elsewhere(r) => assert!(r.contains(why), "{r}"),
        other => panic!("expected elsewhere ({why}), got {other:?}"),
    };

    assert_eq!(
        here(&t(Some(BOOT), Some(MACHINE), Some(7))),
        Whereabouts::ThisBoot
    );
    assert_eq!(
        here(&t(
            Some(&BOOT.to_uppercase()),
            Some(&MACHINE.to_uppercase()),
            Some(7)
        )),
        Whereabouts::ThisBoot
    );
    assert_eq!(
        here(&t(Some(BOOT), Some(MACHINE), Some(8))),
        Whereabouts::OtherPidNamespace {
            recorded: 8,
            here: 7
        }
    );
    assert!(matches!(
        here(&t(Some(OTHER_BOOT), Some(MACHINE), Some(8))),
        Whereabouts::Rebooted(_)
    ));
    // A live member runs that boot: a clone sharing the machine id, not a reboot.
    let cloned = Target {
        reboot_contradicted: Some("the live member rm9 runs that boot".into()),
        ..t(Some(OTHER_BOOT), Some(MACHINE), Some(8))
    };
    elsewhere(here(&cloned), "the live member rm9 runs that boot");
    // It says nothing about a record of this very boot.
    assert_eq!(
        here(&Target {
            reboot_contradicted: Some("irrelevant".into()),
            ..t(Some(BOOT), Some(MACHINE), Some(7))
        }),
        Whereabouts::ThisBoot
    );
    elsewhere(
        here(&t(Some(BOOT), Some(OTHER_MACHINE), Some(7))),
        "another machine",
    );
    elsewhere(
        here(&t(Some(OTHER_BOOT), Some(OTHER_MACHINE), Some(7))),
        "another machine",
    );
    elsewhere(here(&t(Some(OTHER_BOOT), None, Some(7))), "no machine id");
    elsewhere(
        here(&t(Some(OTHER_BOOT), Some(MACHINE), None)),
        "no pid namespace",
    );
    elsewhere(
        here(&t(Some(BOOT), Some(MACHINE), Some(0))),
        "no pid namespace",
    );
    elsewhere(here(&t(None, Some(MACHINE), Some(7))), "no boot id");
    elsewhere(
        here(&t(Some("garbage"), Some(MACHINE), Some(7))),
        "not a UUID",
    );
    elsewhere(
        here(&t(Some(BOOT), Some("garbage"), Some(7))),
        "not 32 hex digits",
    );
    // Unknown on this side.
    let all = t(Some(BOOT), Some(MACHINE), Some(7));
    elsewhere(whereabouts(BOOT, "", 7, &all), "machine id");
    elsewhere(
        whereabouts(BOOT, MACHINE, 0, &all),
        "pid namespace is unknown",
    );
    elsewhere(whereabouts("", MACHINE, 7, &all), "boot id");
    let rebooted = t(Some(OTHER_BOOT), Some(MACHINE), Some(7));
    elsewhere(whereabouts(BOOT, "", 7, &rebooted), "machine id");
    elsewhere(
        whereabouts(BOOT, MACHINE, 0, &rebooted),
        "pid namespace is unknown",
    );
}

#[test]
fn deadlines_past_what_an_instant_holds_do_not_panic() {
    let now = Instant::now();
    assert_eq!(
        deadline_after(now, Duration::from_secs(1)),
        now + Duration::from_secs(1)
    );
    assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(86_400 * 365));
}

#[test]
fn this_process_is_running_with_its_own_start_time_only() {
    let me = std::process::id();
    let t = start_time(me).unwrap();
    assert!(is_running(me, Some(t)));
    assert!(is_running(me, None));
    assert!(!is_running(me, Some(t + 1)));
    assert!(group_members(pgid(me).unwrap()).contains(&me));
    assert!(!boot_id().unwrap().is_empty());
}
