use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Default, Serialize, Deserialize, Job)]
#[cron("0 3 * * *", tz = "Europe/Berlin", catch_up = "none", overlap = "skip")]
#[cron("*/10 * * * * *", name = "every-ten-seconds")]
#[cron("@hourly", name = "hourly", catch_up = "1h")]
struct Nightly;

impl Perform for Nightly {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let _ = cx.fire_time();
        Ok(())
    }
}

fn main() {
    let declared: Vec<_> = fairjob::__private::inventory::iter::<fairjob::__private::CronDeclaration>
        .into_iter()
        .map(|d| (d.name, d.expr, d.tz, d.skip_overlap))
        .collect();
    assert_eq!(declared.len(), 3, "{declared:?}");
    assert!(declared.contains(&("Nightly", "0 3 * * *", "Europe/Berlin", true)));
}
