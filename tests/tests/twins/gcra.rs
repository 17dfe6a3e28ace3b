//! GCRA, the rule of rate limits: `fairjob::policy::gcra::judge` and its Lua
//! twin `rate_judge` (`broker/scripts/lib/gcra.lua`, run as Redis runs it)
//! agree on a table of rates and theoretical arrival times, pausing, bursts
//! and uneven periods included. (The limiters' whole state machine, waiters
//! and releases, is compared in the `shards*` cases.)

use std::time::Duration;

use fairjob_tests::Redis;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lua_rule_is_the_rust_rule() {
    fairjob::testing::ScriptClock::install();
    use fairjob::rate::{Rate, Verdict, judge};
    let redis = Redis::start().await;
    let src = fairjob::broker::assemble(concat!(
        "--! use gcra\n",
        "local tat = nil \
         if ARGV[4] ~= '' then tat = tonumber(ARGV[4]) end \
         local ok, v = rate_judge(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tat, tonumber(ARGV[5])) \
         if ok == nil then return {'paused', ''} end \
         if ok then return {'allow', fj_num(v)} end \
         return {'wait', fj_num(v)}"
    ));
    let script = redis::Script::new(&src);
    let now: u64 = 1_764_000_000_000_000;
    for (limit, per_ms, burst) in [
        (20, 1000, 0),
        (3, 1000, 0),
        (7, 60_000, 3),
        (0, 1000, 1),
        (1, 1, 0),
    ] {
        let rate = Rate {
            limit,
            per: Duration::from_millis(per_ms),
            burst,
        };
        for tat in [
            None,
            Some(now - 5),
            Some(now),
            Some(now + 40_000),
            Some(now + 400_000_000),
        ] {
            let (kind, v): (String, String) = script
                .arg(limit)
                .arg(per_ms * 1000)
                .arg(burst)
                .arg(tat.map(|t| t.to_string()).unwrap_or_default())
                .arg(now)
                .invoke_async(&mut redis.conn())
                .await
                .unwrap();
            let lua = match kind.as_str() {
                "paused" => Verdict::Paused,
                "allow" => Verdict::Allow {
                    tat: v.parse().unwrap(),
                },
                _ => Verdict::Wait {
                    until: v.parse().unwrap(),
                },
            };
            assert_eq!(
                lua,
                judge(rate, tat, now),
                "{limit}/{per_ms}ms burst {burst} tat {tat:?}"
            );
        }
    }
}
