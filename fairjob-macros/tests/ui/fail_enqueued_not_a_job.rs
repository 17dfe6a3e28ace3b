// `Fake::enqueued::<T>()` takes job types only: a `String` is not one.
fn main() {
    let fake = fairjob::testing::Fake::new();
    let _ = fake.enqueued::<String>();
}
