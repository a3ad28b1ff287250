//! Image garbage collection as the kubelet's `realImageGCManager` does it: every 5 minutes
//! (and whenever the eviction manager asks to free space), images are detected, those unused
//! for longer than `imageMaximumGCAge` are removed, and when the image filesystem is at least
//! `imageGCHighThresholdPercent` full, unused images are removed, least recently used first,
//! until it is down to `imageGCLowThresholdPercent`. Never removed: an image any container (in
//! any state) refers to, the runtime's sandbox (pause) image, a pinned image, and an image first
//! seen less than `imageMinimumGCAge` ago.
//!
//! The decisions are pure functions of the image records and `now` ([`detect`],
//! [`bytes_to_free`], [`select_images_to_free`], [`select_old_images`]); [`ImageGc`] keeps the
//! records between runs and acts through [`ImageGcRuntime`].

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cri::api;
use crate::events::{node_ref, EventRecorder, EventType};

/// How often image GC runs (the kubelet's `ImageGCPeriod`).
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

/// The configuration of image GC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    pub high_threshold_percent: u32,
    pub low_threshold_percent: u32,
    pub min_age: Duration,
    /// Zero: no maximum age.
    pub max_age: Duration,
}

impl ImageGcPolicy {
    /// The kubelet does not run image GC at all when the high threshold is 100 and there is no
    /// maximum age.
    pub fn disabled(&self) -> bool {
        self.high_threshold_percent >= 100 && self.max_age.is_zero()
    }
}

/// What GC remembers of one image between runs (the kubelet's `imageRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRecord {
    /// When this nodelet first saw the image (a restart starts the minimum age over).
    pub first_detected: Instant,
    /// The last detection that found a container using it; `None`: never seen in use.
    pub last_used: Option<Instant>,
    pub size: u64,
    pub pinned: bool,
    /// In use at the last detection.
    pub in_use: bool,
}

/// Whether any reference in `in_use` (container images, image refs, the sandbox image) names
/// this image, by ID, tag or digest.
pub fn image_in_use(image: &api::Image, in_use: &HashSet<String>) -> bool {
    in_use.contains(&image.id)
        || image.repo_tags.iter().any(|t| in_use.contains(t))
        || image.repo_digests.iter().any(|d| in_use.contains(d))
}

/// The kubelet's `detectImages`: records for the images now present (new ones first detected
/// `now`, the ones in use last used `now`); images no longer present are forgotten.
pub fn detect(
    previous: &BTreeMap<String, ImageRecord>,
    images: &[api::Image],
    in_use: &HashSet<String>,
    now: Instant,
) -> BTreeMap<String, ImageRecord> {
    images
        .iter()
        .map(|image| {
            let used = image_in_use(image, in_use);
            let old = previous.get(&image.id);
            let record = ImageRecord {
                first_detected: old.map_or(now, |r| r.first_detected),
                last_used: if used {
                    Some(now)
                } else {
                    old.and_then(|r| r.last_used)
                },
                size: image.size,
                pinned: image.pinned,
                in_use: used,
            };
            (image.id.clone(), record)
        })
        .collect()
}

/// How many bytes to free: `None` while usage is below the high threshold, else what brings it
/// down to the low threshold (the kubelet's integer arithmetic).
pub fn bytes_to_free(capacity: u64, available: u64, policy: &ImageGcPolicy) -> Option<u64> {
    if capacity == 0 {
        return None;
    }
    let available = available.min(capacity);
    let usage_percent = 100 - (u128::from(available) * 100 / u128::from(capacity)) as u64;
    if usage_percent < u64::from(policy.high_threshold_percent) {
        return None;
    }
    let target_available =
        u128::from(capacity) * u128::from(100 - policy.low_threshold_percent.min(100)) / 100;
    Some(target_available.saturating_sub(u128::from(available)) as u64)
}

fn collectable(record: &ImageRecord) -> bool {
    !record.in_use && !record.pinned
}

/// The images to remove, in order, to free `bytes` (the kubelet's `freeSpace`): not in use, not
/// pinned, first seen at least `min_age` ago; least recently used first (never used before
/// used), then first detected first; stops once enough is chosen.
pub fn select_images_to_free(
    records: &BTreeMap<String, ImageRecord>,
    now: Instant,
    min_age: Duration,
    bytes: u64,
) -> Vec<String> {
    let mut candidates: Vec<(&String, &ImageRecord)> = records
        .iter()
        .filter(|(_, r)| collectable(r))
        .filter(|(_, r)| now.saturating_duration_since(r.first_detected) >= min_age)
        .collect();
    candidates.sort_by(|(a_id, a), (b_id, b)| {
        a.last_used
            .cmp(&b.last_used)
            .then(a.first_detected.cmp(&b.first_detected))
            .then(a_id.cmp(b_id))
    });
    let mut chosen = Vec::new();
    let mut freed = 0u64;
    for (id, record) in candidates {
        if freed >= bytes {
            break;
        }
        chosen.push(id.clone());
        freed = freed.saturating_add(record.size);
    }
    chosen
}

/// Images unused for longer than `max_age` (the kubelet's `freeOldImages`); none when
/// `max_age` is zero. An image never seen in use counts from when it was first detected.
pub fn select_old_images(
    records: &BTreeMap<String, ImageRecord>,
    now: Instant,
    min_age: Duration,
    max_age: Duration,
) -> Vec<String> {
    if max_age.is_zero() {
        return Vec::new();
    }
    records
        .iter()
        .filter(|(_, r)| collectable(r))
        .filter(|(_, r)| now.saturating_duration_since(r.first_detected) >= min_age)
        .filter(|(_, r)| {
            now.saturating_duration_since(r.last_used.unwrap_or(r.first_detected)) > max_age
        })
        .map(|(id, _)| id.clone())
        .collect()
}

/// The image filesystem's size and free space, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    pub capacity: u64,
    pub available: u64,
}

/// What image GC needs of the runtime.
#[async_trait]
pub trait ImageGcRuntime: Send + Sync + 'static {
    async fn list_images(&self) -> Result<Vec<api::Image>, Error>;
    /// Every image reference a container in any state names (image and image ref), and the
    /// runtime's sandbox image.
    async fn images_in_use(&self) -> Result<HashSet<String>, Error>;
    async fn remove_image(&self, id: &str) -> Result<(), Error>;
    /// `None`: the runtime offers no filesystem numbers (then only the maximum age applies).
    async fn image_fs_space(&self) -> Result<Option<FsSpace>, Error>;
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageGcReport {
    pub removed: Vec<String>,
    pub bytes_freed: u64,
}

/// Image GC with its records; shared by its periodic task and the eviction manager
/// ([`ImageGc::free_space`]).
pub struct ImageGc {
    runtime: Arc<dyn ImageGcRuntime>,
    policy: ImageGcPolicy,
    records: Mutex<BTreeMap<String, ImageRecord>>,
    events: EventRecorder,
    node_name: String,
}

impl ImageGc {
    pub fn new(
        runtime: Arc<dyn ImageGcRuntime>,
        policy: ImageGcPolicy,
        events: EventRecorder,
        node_name: String,
    ) -> Self {
        ImageGc {
            runtime,
            policy,
            records: Mutex::new(BTreeMap::new()),
            events,
            node_name,
        }
    }

    async fn detect(&self, records: &mut BTreeMap<String, ImageRecord>) -> Result<(), Error> {
        // Containers first: an image listed after its container appeared is seen as in use.
        let in_use = self.runtime.images_in_use().await?;
        let images = self.runtime.list_images().await?;
        *records = detect(records, &images, &in_use, Instant::now());
        Ok(())
    }

    async fn remove(
        &self,
        records: &mut BTreeMap<String, ImageRecord>,
        ids: Vec<String>,
        report: &mut ImageGcReport,
    ) -> Result<(), Error> {
        for id in ids {
            let size = records.get(&id).map_or(0, |r| r.size);
            tracing::info!(image.id = %id, size, "removing unused image");
            match self.runtime.remove_image(&id).await {
                Ok(()) => {}
                Err(Error::Runtime { source, .. }) if source.is_not_found() => {}
                Err(e) => return Err(e),
            }
            records.remove(&id);
            report.removed.push(id);
            report.bytes_freed = report.bytes_freed.saturating_add(size);
        }
        Ok(())
    }

    /// Removes unused images until `bytes` are freed, oldest last use first, and returns what it
    /// removed (possibly less than asked). For the eviction manager's node-level reclaim.
    pub async fn free_space(&self, bytes: u64) -> Result<ImageGcReport, Error> {
        let mut records = self.records.lock().await;
        self.detect(&mut records).await?;
        let mut report = ImageGcReport::default();
        let chosen = select_images_to_free(&records, Instant::now(), self.policy.min_age, bytes);
        self.remove(&mut records, chosen, &mut report).await?;
        Ok(report)
    }

    /// One run: images past the maximum age, then down to the low threshold when usage is at
    /// or above the high one. Not freeing enough is [`Error::FreeDiskSpaceFailed`] (with the
    /// `FreeDiskSpaceFailed` event), after removing what could be removed.
    #[tracing::instrument(name = "image_gc", skip_all)]
    pub async fn garbage_collect(&self) -> Result<ImageGcReport, Error> {
        let mut records = self.records.lock().await;
        self.detect(&mut records).await?;
        let mut report = ImageGcReport::default();
        let now = Instant::now();
        let old = select_old_images(&records, now, self.policy.min_age, self.policy.max_age);
        self.remove(&mut records, old, &mut report).await?;

        let Some(space) = self.runtime.image_fs_space().await? else {
            return Ok(report);
        };
        let Some(wanted) = bytes_to_free(space.capacity, space.available, &self.policy) else {
            return Ok(report);
        };
        tracing::info!(
            capacity = space.capacity,
            available = space.available,
            bytes_to_free = wanted,
            "image filesystem above imageGCHighThresholdPercent; freeing space"
        );
        let before = report.bytes_freed;
        let chosen = select_images_to_free(&records, now, self.policy.min_age, wanted);
        self.remove(&mut records, chosen, &mut report).await?;
        let freed = report.bytes_freed - before;
        if freed < wanted {
            let error = Error::FreeDiskSpaceFailed {
                wanted,
                freed,
                removed: report.removed.len(),
            };
            self.events.record(
                &node_ref(&self.node_name),
                EventType::Warning,
                "FreeDiskSpaceFailed",
                error.to_string(),
            );
            return Err(error);
        }
        Ok(report)
    }

    /// Runs [`ImageGc::garbage_collect`] now and every [`IMAGE_GC_PERIOD`] until `cancel`; a
    /// second failure in a row is an `ImageGCFailed` event, as the kubelet's.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        if self.policy.disabled() {
            tracing::info!(
                "imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0: image GC is off"
            );
            return;
        }
        let mut tick = tokio::time::interval(IMAGE_GC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_before = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = cancel.cancelled() => return,
            }
            match self.garbage_collect().await {
                Ok(report) => {
                    failed_before = false;
                    crate::metrics::metrics()
                        .image_gc_removed
                        .inc_by(report.removed.len() as u64);
                    tracing::debug!(
                        removed = report.removed.len(),
                        bytes = report.bytes_freed,
                        "image GC done"
                    );
                }
                Err(e) => {
                    if let Error::FreeDiskSpaceFailed { removed, .. } = &e {
                        crate::metrics::metrics()
                            .image_gc_removed
                            .inc_by(*removed as u64);
                    }
                    if failed_before {
                        tracing::error!(error = %e, "image garbage collection failed multiple times in a row");
                        self.events.record(
                            &node_ref(&self.node_name),
                            EventType::Warning,
                            "ImageGCFailed",
                            e.to_string(),
                        );
                    } else {
                        tracing::warn!(error = %e, "image garbage collection failed");
                    }
                    failed_before = true;
                }
            }
            crate::metrics::metrics().image_gc_runs.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    fn rec(first: Instant, last: Option<Instant>, size: u64) -> ImageRecord {
        ImageRecord {
            first_detected: first,
            last_used: last,
            size,
            pinned: false,
            in_use: false,
        }
    }

    #[test]
    fn bytes_to_free_table() {
        let p = ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::ZERO,
            max_age: Duration::ZERO,
        };
        // (capacity, available, want)
        let cases = [
            (1000, 200, None),     // 80% used: below high
            (1000, 151, None),     // 84.9% → 100 - 15 = 85? integer: 151*100/1000 = 15 → 85
            (1000, 150, Some(50)), // 85%: free to 20% available (200)
            (1000, 0, Some(200)),  // full
            (0, 0, None),          // no capacity known
            (1000, 5000, None),    // available larger than capacity: clamped, 0% used
        ];
        for (capacity, available, want) in cases {
            let got = bytes_to_free(capacity, available, &p);
            if (capacity, available) == (1000, 151) {
                // The kubelet's integer percentage rounds usage up at the boundary.
                assert_eq!(got, Some(49), "{capacity} {available}");
                continue;
            }
            assert_eq!(got, want, "{capacity} {available}");
        }
        let all = ImageGcPolicy {
            high_threshold_percent: 1,
            low_threshold_percent: 0,
            ..p
        };
        assert_eq!(bytes_to_free(1000, 500, &all), Some(500));
    }

    #[test]
    fn detect_keeps_first_seen_and_marks_use() {
        let now = t0();
        let later = now + Duration::from_secs(60);
        let image = |id: &str, tag: &str| api::Image {
            id: id.into(),
            repo_tags: vec![tag.into()],
            size: 10,
            ..Default::default()
        };
        let images = vec![image("sha256:a", "x/a:1"), image("sha256:b", "x/b:1")];
        let first = detect(
            &BTreeMap::new(),
            &images,
            &HashSet::from(["x/a:1".to_string()]),
            now,
        );
        assert_eq!(first["sha256:a"].last_used, Some(now));
        assert!(first["sha256:a"].in_use);
        assert_eq!(first["sha256:b"].last_used, None);
        let mut images2 = images.clone();
        images2.push(image("sha256:c", "x/c:1"));
        images2.remove(0);
        // a is gone; b now in use by its ID; c is new.
        let second = detect(
            &first,
            &images2,
            &HashSet::from(["sha256:b".to_string()]),
            later,
        );
        assert!(!second.contains_key("sha256:a"));
        assert_eq!(second["sha256:b"].first_detected, now);
        assert_eq!(second["sha256:b"].last_used, Some(later));
        assert_eq!(second["sha256:c"].first_detected, later);
        // An image by digest.
        let digest = api::Image {
            id: "sha256:d".into(),
            repo_digests: vec!["x/d@sha256:dd".into()],
            ..Default::default()
        };
        assert!(image_in_use(
            &digest,
            &HashSet::from(["x/d@sha256:dd".to_string()])
        ));
        assert!(!image_in_use(
            &digest,
            &HashSet::from(["x/d:1".to_string()])
        ));
    }

    #[test]
    fn select_images_to_free_table() {
        let now = t0() + Duration::from_secs(3600);
        let at = |s: u64| now - Duration::from_secs(s);
        struct Case {
            name: &'static str,
            records: Vec<(&'static str, ImageRecord)>,
            min_age: Duration,
            bytes: u64,
            want: Vec<&'static str>,
        }
        let in_use = ImageRecord {
            in_use: true,
            ..rec(at(3000), Some(now), 100)
        };
        let pinned = ImageRecord {
            pinned: true,
            ..rec(at(3000), None, 100)
        };
        let cases = vec![
            Case {
                name: "oldest last use first, never used before used",
                records: vec![
                    ("used-recently", rec(at(3000), Some(at(10)), 100)),
                    ("used-long-ago", rec(at(3000), Some(at(2000)), 100)),
                    ("never-used", rec(at(3000), None, 100)),
                ],
                min_age: Duration::ZERO,
                bytes: 1000,
                want: vec!["never-used", "used-long-ago", "used-recently"],
            },
            Case {
                name: "ties on last use go by first detection",
                records: vec![
                    ("b-new", rec(at(100), None, 100)),
                    ("a-old", rec(at(3000), None, 100)),
                ],
                min_age: Duration::ZERO,
                bytes: 1000,
                want: vec!["a-old", "b-new"],
            },
            Case {
                name: "stops once enough is chosen",
                records: vec![
                    ("1", rec(at(3000), Some(at(3000)), 60)),
                    ("2", rec(at(3000), Some(at(2000)), 60)),
                    ("3", rec(at(3000), Some(at(1000)), 60)),
                ],
                min_age: Duration::ZERO,
                bytes: 100,
                want: vec!["1", "2"],
            },
            Case {
                name: "in use and pinned are never chosen",
                records: vec![
                    ("used", in_use),
                    ("pinned", pinned),
                    ("free", rec(at(3000), None, 1)),
                ],
                min_age: Duration::ZERO,
                bytes: 1000,
                want: vec!["free"],
            },
            Case {
                name: "younger than the minimum age stays",
                records: vec![
                    ("young", rec(at(60), None, 100)),
                    ("old", rec(at(120), None, 100)),
                ],
                min_age: Duration::from_secs(120),
                bytes: 1000,
                want: vec!["old"],
            },
            Case {
                name: "nothing to free chooses nothing",
                records: vec![("a", rec(at(3000), None, 100))],
                min_age: Duration::ZERO,
                bytes: 0,
                want: vec![],
            },
        ];
        for c in cases {
            let records: BTreeMap<String, ImageRecord> = c
                .records
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let got = select_images_to_free(&records, now, c.min_age, c.bytes);
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn select_old_images_table() {
        let now = t0() + Duration::from_secs(3600);
        let at = |s: u64| now - Duration::from_secs(s);
        let records: BTreeMap<String, ImageRecord> = [
            ("unused-long", rec(at(3000), Some(at(2000)), 1)),
            ("unused-short", rec(at(3000), Some(at(100)), 1)),
            ("never-used-old", rec(at(2000), None, 1)),
            ("never-used-new", rec(at(100), None, 1)),
            (
                "in-use",
                ImageRecord {
                    in_use: true,
                    ..rec(at(3000), Some(now), 1)
                },
            ),
            (
                "pinned",
                ImageRecord {
                    pinned: true,
                    ..rec(at(3000), None, 1)
                },
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let max = Duration::from_secs(1000);
        assert_eq!(
            select_old_images(&records, now, Duration::ZERO, max),
            vec!["never-used-old", "unused-long"]
        );
        assert!(select_old_images(&records, now, Duration::ZERO, Duration::ZERO).is_empty());
        // The minimum age holds for old images too.
        assert_eq!(
            select_old_images(&records, now, Duration::from_secs(2500), max),
            vec!["unused-long"]
        );
    }

    /// A runtime with a list of images, a set in use and a fixed filesystem.
    struct FakeImages {
        images: std::sync::Mutex<Vec<api::Image>>,
        in_use: HashSet<String>,
        space: FsSpace,
    }

    #[async_trait]
    impl ImageGcRuntime for FakeImages {
        async fn list_images(&self) -> Result<Vec<api::Image>, Error> {
            Ok(self.images.lock().unwrap().clone())
        }
        async fn images_in_use(&self) -> Result<HashSet<String>, Error> {
            Ok(self.in_use.clone())
        }
        async fn remove_image(&self, id: &str) -> Result<(), Error> {
            self.images.lock().unwrap().retain(|i| i.id != id);
            Ok(())
        }
        async fn image_fs_space(&self) -> Result<Option<FsSpace>, Error> {
            Ok(Some(self.space))
        }
    }

    fn fake(space: FsSpace) -> Arc<FakeImages> {
        let image = |id: &str, size| api::Image {
            id: id.into(),
            repo_tags: vec![format!("x/{id}:1")],
            size,
            ..Default::default()
        };
        Arc::new(FakeImages {
            images: std::sync::Mutex::new(vec![
                image("pause", 10),
                image("app", 20),
                image("old1", 30),
                image("old2", 40),
            ]),
            in_use: ["x/pause:1", "x/app:1"].map(String::from).into(),
            space,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn garbage_collect_waits_for_the_minimum_age_then_frees() {
        let rt = fake(FsSpace {
            capacity: 100,
            available: 10,
        });
        let events = EventRecorder::new(crate::clock::Clock::system(), "kubelet", "n");
        let gc = ImageGc::new(
            rt.clone(),
            ImageGcPolicy {
                high_threshold_percent: 85,
                low_threshold_percent: 80,
                min_age: Duration::from_secs(120),
                max_age: Duration::ZERO,
            },
            events.clone(),
            "n".into(),
        );
        // First sight: everything is too young; nothing freed, so the run fails.
        let err = gc.garbage_collect().await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::FreeDiskSpaceFailed {
                    wanted: 10,
                    freed: 0,
                    ..
                }
            ),
            "{err}"
        );
        tokio::time::advance(Duration::from_secs(121)).await;
        // 10 bytes wanted: old1 (30) is enough, and old2 stays.
        let report = gc.garbage_collect().await.unwrap();
        assert_eq!(report.removed, vec!["old1"]);
        let left: Vec<String> = rt
            .images
            .lock()
            .unwrap()
            .iter()
            .map(|i| i.id.clone())
            .collect();
        assert_eq!(left, vec!["pause", "app", "old2"]);
        let failed: Vec<_> = events
            .events()
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("FreeDiskSpaceFailed"))
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(
            failed[0].message.as_deref(),
            Some("Failed to garbage collect required amount of images. Attempted to free 10 bytes, but only found 0 bytes eligible to free.")
        );
        // free_space for the eviction manager takes what it can.
        let report = gc.free_space(1000).await.unwrap();
        assert_eq!(report.removed, vec!["old2"]);
        assert_eq!(report.bytes_freed, 40);
    }

    #[tokio::test(start_paused = true)]
    async fn run_every_five_minutes_and_image_gc_failed_on_the_second_failure() {
        let rt = fake(FsSpace {
            capacity: 100,
            available: 10,
        });
        let events = EventRecorder::new(crate::clock::Clock::system(), "kubelet", "n");
        let policy = ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            // Never old enough: every run fails to free anything.
            min_age: Duration::from_secs(24 * 3600),
            max_age: Duration::ZERO,
        };
        let gc = Arc::new(ImageGc::new(rt, policy, events.clone(), "n".into()));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(gc.clone().run(cancel.clone()));
        let count = |reason: &str| {
            events
                .events()
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .map(|e| e.count.unwrap_or(1))
                .sum::<i32>()
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            (count("FreeDiskSpaceFailed"), count("ImageGCFailed")),
            (1, 0)
        );
        tokio::time::sleep(IMAGE_GC_PERIOD - Duration::from_secs(2)).await;
        assert_eq!(
            count("FreeDiskSpaceFailed"),
            1,
            "the second run is 5 minutes after the first"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            (count("FreeDiskSpaceFailed"), count("ImageGCFailed")),
            (2, 1)
        );
        cancel.cancel();
        task.await.unwrap();

        // Off at 100 % without a maximum age: returns at once.
        let off = ImageGcPolicy {
            high_threshold_percent: 100,
            ..policy
        };
        assert!(off.disabled());
        assert!(!ImageGcPolicy {
            max_age: Duration::from_secs(600),
            ..off
        }
        .disabled());
    }
}
