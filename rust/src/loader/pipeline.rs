//! [`Pipeline`]: starts the stages of [`super::stages`] and hands their batches to the caller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};

use super::guard::FailureGuard;
use super::sample::{Ctx, Done, Job};
use super::stages::{spawn, Assembler, IoStage, Out, WorkerStage};
use super::stats::{SharedStats, Stats};
use super::{Batch, LoaderConfig, Mode, TransformFactory};
use crate::error::{Error, Result};
use crate::order::Order;
use crate::shards::{Dataset, LabelKind, ReadOptions};

/// What [`Pipeline::recv_timeout`] returns.
pub enum Next {
    Batch(Box<Batch>),
    /// An eval pass is over.
    End,
    Timeout,
    Error(Error),
}

/// A running pipeline. Dropping it (or [`Pipeline::close`]) stops and joins every thread.
pub struct Pipeline {
    rx: Option<Receiver<Out>>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<SharedStats>,
    stop: Arc<AtomicBool>,
    finished: bool,
    /// Set once the pipeline failed; every later call reports it again.
    failed: Option<String>,
}

impl Pipeline {
    /// Validate, then start the threads. Fails fast if the transform cannot be built.
    pub fn start(
        ds: Arc<Dataset>,
        cfg: LoaderConfig,
        factory: TransformFactory,
    ) -> Result<Pipeline> {
        let n_rows = ds.n_rows();
        cfg.validate(n_rows)?;
        check_options(&ds, &cfg)?;
        let n_targets = multilabel_width(&ds, &cfg)?;
        // Build one transform up front so that configuration errors surface here, not in a thread.
        let mut first = Some(factory()?);
        let in_flight = cfg.in_flight_or_default();
        // Local slots to produce (None: infinite).
        let total: Option<u64> = match cfg.mode {
            Mode::Train => None,
            Mode::Eval => Some(
                cfg.eval_batches(n_rows).saturating_sub(cfg.start_step) * cfg.local_batch() as u64,
            ),
        };
        let stats = Arc::new(SharedStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = Arc::new(Ctx {
            order: Order::new(n_rows, cfg.seed, cfg.block_size, cfg.shuffle_window),
            cfg: cfg.clone(),
            n_rows,
            n_targets,
            stats: stats.clone(),
            stop: stop.clone(),
        });
        let (tickets_tx, tickets_rx) = bounded::<()>(in_flight);
        for _ in 0..in_flight {
            tickets_tx.send(()).unwrap();
        }
        let (jobs_tx, jobs_rx) = bounded::<Job>(in_flight);
        let (done_tx, done_rx) = bounded::<Done>(in_flight);
        let (out_tx, out_rx) = bounded::<Out>(cfg.prefetch);

        let io = IoStage {
            ctx: ctx.clone(),
            ds: ds.clone(),
            tickets: tickets_rx,
            jobs: jobs_tx,
            total,
        };
        let mut threads = vec![spawn("birdjepa-io", move || io.run())?];
        for w in 0..cfg.n_workers {
            let worker = WorkerStage {
                ctx: ctx.clone(),
                ds: ds.clone(),
                jobs: jobs_rx.clone(),
                done: done_tx.clone(),
                factory: factory.clone(),
                first: first.take(),
            };
            threads.push(spawn(&format!("birdjepa-worker-{w}"), move || {
                worker.run()
            })?);
        }
        drop(jobs_rx);
        drop(done_tx);
        let assembler = Assembler {
            guard: FailureGuard::new(cfg.failure_window, cfg.max_failure_fraction),
            ctx,
            ds,
            done: done_rx,
            tickets: tickets_tx,
            out: out_tx,
            total,
        };
        threads.push(spawn("birdjepa-assemble", move || assembler.run())?);

        Ok(Pipeline {
            rx: Some(out_rx),
            threads,
            stats,
            stop,
            finished: false,
            failed: None,
        })
    }

    /// Wait up to `timeout` for the next batch.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Next {
        if let Some(msg) = &self.failed {
            return Next::Error(Error::pipeline(format!(
                "the loader stopped after an error: {msg}"
            )));
        }
        if self.finished {
            return Next::End;
        }
        let Some(rx) = &self.rx else {
            return Next::Error(Error::bad_argument(
                "loader",
                "an open loader",
                "a closed loader",
            ));
        };
        match rx.recv_timeout(timeout) {
            Ok(Out::Batch(b)) => Next::Batch(b),
            Ok(Out::End) => {
                self.finished = true;
                Next::End
            }
            Ok(Out::Error(e)) => {
                self.failed = Some(e.to_string());
                Next::Error(e)
            }
            Err(RecvTimeoutError::Timeout) => Next::Timeout,
            Err(RecvTimeoutError::Disconnected) => {
                let detail = "the loader pipeline stopped unexpectedly (a thread panicked)";
                self.failed = Some(detail.into());
                Next::Error(Error::pipeline(detail))
            }
        }
    }

    /// Block until the next batch; `None` at the end of an eval pass.
    pub fn next_batch(&mut self) -> Option<Result<Batch>> {
        loop {
            match self.recv_timeout(Duration::from_millis(50)) {
                Next::Batch(b) => return Some(Ok(*b)),
                Next::End => return None,
                Next::Error(e) => return Some(Err(e)),
                Next::Timeout => {}
            }
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats.snapshot(self.rx.as_ref().map_or(0, |r| r.len()))
    }

    /// Stop and join every thread. Idempotent. Waits at most for in-progress transforms.
    pub fn close(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.rx = None; // disconnects the assembler, which cascades to the other stages
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The dataset was opened with the columns and path settings `cfg` reads.
fn check_options(ds: &Dataset, cfg: &LoaderConfig) -> Result<()> {
    let (have, want) = (ds.options(), ReadOptions::of(cfg));
    if *have == want {
        return Ok(());
    }
    Err(Error::bad_argument(
        "dataset",
        format!("a Dataset opened with this loader's settings ({want:?}; pass config=)"),
        format!("{have:?}"),
    ))
}

/// The multi-hot target width: `n_classes` for a list<int> label column (every label checked to
/// lie in [0, n_classes), or -1), 0 for an int column.
fn multilabel_width(ds: &Dataset, cfg: &LoaderConfig) -> Result<usize> {
    let (LabelKind::Multi, Some(column)) = (ds.label_kind(), ds.label_column()) else {
        return Ok(0);
    };
    let n = cfg.n_classes;
    if n == 0 {
        return Err(Error::bad_argument(
            "n_classes",
            format!("the number of classes (>= 1): label column '{column}' is a list (multilabel)"),
            n,
        ));
    }
    let Some(r) = ds.label_range()? else {
        return Ok(n);
    };
    let bad = [
        r.min.filter(|m| m.0 < -1),
        r.max.filter(|m| m.0 >= n as i64),
    ];
    if let Some((v, shard, row)) = bad.into_iter().flatten().next() {
        return Err(Error::Dataset {
            path: ds.shards()[shard as usize].path.display().to_string(),
            detail: format!(
                "row {row}, column '{column}': expected class ids in [0, n_classes={n}) (or -1 \
                 for none), got {v}"
            ),
        });
    }
    Ok(n)
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clip::{Crop, Transform};
    use crate::debug_transform::DebugTransform;
    use crate::shards::testutil::*;
    use crate::shards::Format;
    use std::path::PathBuf;

    fn dataset(name: &str, corrupt: &[u64]) -> Arc<Dataset> {
        let d = tmpdir(name);
        let mut paths: Vec<PathBuf> = Vec::new();
        for (k, r) in [(0u64, 0..300u64), (1, 300..500), (2, 500..777)] {
            let p = d.join(format!("s{k}.arrow"));
            write_shard(
                &p,
                r,
                50,
                if k == 1 { Format::File } else { Format::Stream },
            );
            paths.push(p);
        }
        if !corrupt.is_empty() {
            // Rewrite shard 0 with corrupt payloads at the given rows.
            let p = &paths[0];
            let f = std::fs::File::create(p).unwrap();
            let b0 = hf_batch(0..0, |_| 0);
            let mut w = arrow_ipc::writer::StreamWriter::try_new(f, &b0.schema()).unwrap();
            let mut bytes = arrow_array::builder::BinaryBuilder::new();
            let mut paths_b = arrow_array::builder::StringBuilder::new();
            for i in 0..300u64 {
                if corrupt.contains(&i) {
                    bytes.append_value(b"CORRUPT");
                } else {
                    bytes.append_value(payload(i));
                }
                paths_b.append_value("x");
            }
            let base = hf_batch(0..300, |i| (i % 10) as i64);
            let audio = base
                .column(0)
                .as_any()
                .downcast_ref::<arrow_array::StructArray>()
                .unwrap();
            let audio = arrow_array::StructArray::new(
                audio.fields().clone(),
                vec![Arc::new(bytes.finish()), Arc::new(paths_b.finish())],
                None,
            );
            let batch = arrow_array::RecordBatch::try_new(
                base.schema(),
                vec![Arc::new(audio), base.column(1).clone()],
            )
            .unwrap();
            w.write(&batch).unwrap();
            w.finish().unwrap();
        }
        Arc::new(Dataset::open(&paths, "audio", Some("label")).unwrap())
    }

    /// The error message of a pipeline that must refuse to start.
    fn start_error(ds: &Arc<Dataset>, c: LoaderConfig) -> String {
        Pipeline::start(ds.clone(), c, debug_factory(0))
            .err()
            .expect("the pipeline started")
            .to_string()
    }

    fn debug_factory(delay_ms: u64) -> TransformFactory {
        Arc::new(move || {
            Ok(
                Box::new(DebugTransform::new(6, 4, Duration::from_millis(delay_ms)))
                    as Box<dyn Transform>,
            )
        })
    }

    fn cfg(mode: Mode) -> LoaderConfig {
        LoaderConfig {
            mode,
            batch_size: 16,
            seed: 7,
            n_frames: 8,
            n_mels: 4,
            block_size: 8,
            shuffle_window: 64,
            ..Default::default()
        }
    }

    fn take(ds: &Arc<Dataset>, c: LoaderConfig, n: usize) -> Vec<Batch> {
        let mut p = Pipeline::start(ds.clone(), c, debug_factory(0)).unwrap();
        (0..n)
            .map_while(|_| p.next_batch().map(|b| b.unwrap()))
            .collect()
    }

    fn same(a: &[Batch], b: &[Batch]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x.step, y.step);
            assert_eq!(x.index, y.index);
            assert_eq!(x.target, y.target);
            assert_eq!(x.valid, y.valid);
            assert_eq!(
                x.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn deterministic_across_worker_counts_and_resume() {
        let ds = dataset("pipe-det", &[]);
        let base = take(
            &ds,
            LoaderConfig {
                n_workers: 1,
                ..cfg(Mode::Train)
            },
            120,
        );
        for w in [2, 8] {
            same(
                &base,
                &take(
                    &ds,
                    LoaderConfig {
                        n_workers: w,
                        ..cfg(Mode::Train)
                    },
                    120,
                ),
            );
        }
        for s in [1u64, 48, 49, 97] {
            let resumed = take(
                &ds,
                LoaderConfig {
                    start_step: s,
                    n_workers: 3,
                    ..cfg(Mode::Train)
                },
                120 - s as usize,
            );
            same(&base[s as usize..], &resumed);
        }
        // Epochs are permutations: 777 rows, 120 * 16 = 1920 positions >= 2 epochs.
        let flat: Vec<i64> = base.iter().flat_map(|b| b.index.clone()).collect();
        for e in 0..2 {
            let mut ep: Vec<i64> = flat[e * 777..(e + 1) * 777].to_vec();
            ep.sort();
            assert_eq!(ep, (0..777).collect::<Vec<_>>());
        }
        // Padding and normalisation: frames 6 and 7 are zero; the rest are normalised.
        let b = &base[0];
        let m = 4;
        assert!(b.data[6 * m..8 * m].iter().all(|&v| v == 0.0));
        assert!(b.data[..6 * m].iter().all(|&v| v.abs() < 1.0 && v != 0.0));
    }

    #[test]
    fn processes_union_to_the_global_batch() {
        let ds = dataset("pipe-union", &[3, 4, 100]);
        let c = LoaderConfig {
            n_views: 2,
            ..cfg(Mode::Train)
        };
        let whole = take(&ds, c.clone(), 60);
        let parts: Vec<Vec<Batch>> = (0..4)
            .map(|p| {
                take(
                    &ds,
                    LoaderConfig {
                        process_index: p,
                        process_count: 4,
                        ..c.clone()
                    },
                    60,
                )
            })
            .collect();
        let t = c.n_frames * c.n_mels;
        for (s, w) in whole.iter().enumerate() {
            let idx: Vec<i64> = parts.iter().flat_map(|p| p[s].index.clone()).collect();
            assert_eq!(idx, w.index);
            for v in 0..2 {
                let mut data = Vec::new();
                for p in &parts {
                    data.extend_from_slice(&p[s].data[v * 4 * t..(v + 1) * 4 * t]);
                }
                assert_eq!(data, w.data[v * 16 * t..(v + 1) * 16 * t]);
            }
        }
        // Corrupt rows never appear; they were replaced.
        let flat: Vec<i64> = whole.iter().flat_map(|b| b.index.clone()).collect();
        assert!(!flat.iter().any(|i| [3, 4, 100].contains(i)));
        assert!(whole.iter().all(|b| b.valid.iter().all(|&v| v)));
        let n_fail: usize = whole.iter().map(|b| b.failures.len()).sum();
        assert!(n_fail >= 3, "{n_fail}");
    }

    #[test]
    fn eval_is_finite_ordered_and_padded() {
        let ds = dataset("pipe-eval", &[10]);
        let c = LoaderConfig {
            n_workers: 3,
            ..cfg(Mode::Eval)
        };
        let all = take(&ds, c.clone(), 1000);
        assert_eq!(all.len(), 777usize.div_ceil(16));
        let flat: Vec<i64> = all.iter().flat_map(|b| b.index.clone()).collect();
        let want: Vec<i64> = (0..777)
            .chain(std::iter::repeat_n(-1, 49 * 16 - 777))
            .collect();
        assert_eq!(flat, want);
        let valid: Vec<bool> = all.iter().flat_map(|b| b.valid.clone()).collect();
        assert!(!valid[10] && valid[11] && !valid[777]);
        same(&all, &take(&ds, c.clone(), 1000));
        let resumed = take(
            &ds,
            LoaderConfig {
                start_step: 40,
                ..c
            },
            1000,
        );
        same(&all[40..], &resumed);
    }

    #[test]
    fn list_labels_become_multi_hot_targets_in_train_and_eval() {
        let d = tmpdir("pipe-multi");
        let p = d.join("m.arrow");
        // Row i: classes {i % 4, 4} for even i, none for odd i (a null list every 5th).
        let classes = |i: u64| match i {
            i if i % 2 == 0 => Some(vec![(i % 4) as i64, 4]),
            i if i % 5 == 0 => None,
            _ => Some(vec![]),
        };
        write_multilabel_shard(&p, 0..90, classes);
        let ds = Arc::new(Dataset::open(std::slice::from_ref(&p), "audio", Some("label")).unwrap());
        let check = |b: &Batch, n: usize| {
            assert_eq!(b.target_multi.len(), b.index.len() * n);
            for (slot, &i) in b.index.iter().enumerate() {
                let mut want = vec![0.0f32; n];
                if i >= 0 {
                    match classes(i as u64) {
                        None => want.fill(-1.0), // a null list: unlabelled, masked
                        Some(cs) => cs.into_iter().for_each(|c| want[c as usize] = 1.0),
                    }
                }
                assert_eq!(b.target_multi[slot * n..(slot + 1) * n], want, "row {i}");
            }
        };
        for mode in [Mode::Eval, Mode::Train] {
            let c = LoaderConfig {
                n_classes: 6,
                ..cfg(mode)
            };
            for b in take(&ds, c, 8) {
                check(&b, 6);
            }
        }
        let e = |n| {
            let c = LoaderConfig {
                n_classes: n,
                ..cfg(Mode::Eval)
            };
            start_error(&ds, c)
        };
        let unset = e(0);
        assert!(
            unset.contains("n_classes") && unset.contains("'label'"),
            "{unset}"
        );
        let small = e(4);
        assert!(
            small.contains("m.arrow") && small.contains("row 0, column 'label'"),
            "{small}"
        );
        assert!(
            small.contains("n_classes=4") && small.contains("got 4"),
            "{small}"
        );
        // An int column keeps class-id targets and ignores n_classes.
        let int_ds = dataset("pipe-multi-int", &[]);
        let b = &take(
            &int_ds,
            LoaderConfig {
                n_classes: 6,
                ..cfg(Mode::Eval)
            },
            1,
        )[0];
        assert!(b.target_multi.is_empty() && b.target[..3] == [0, 1, 2]);
    }

    #[test]
    fn local_crops_need_a_window_a_duration_and_frames() {
        let ds = dataset("pipe-local-args", &[]);
        let e = |c: LoaderConfig| start_error(&ds, c);
        let base = LoaderConfig {
            clip_s: 0.1,
            view_window_s: 0.2,
            n_local: 2,
            local_s: 0.05,
            local_frames: Some(3),
            ..cfg(Mode::Train)
        };
        let no_window = e(LoaderConfig {
            view_window_s: 0.0,
            ..base.clone()
        });
        assert!(no_window.contains("view_window_s") && no_window.contains("n_local=2"));
        let long = e(LoaderConfig {
            local_s: 0.2,
            ..base.clone()
        });
        assert!(
            long.contains("local_s")
                && long.contains("[0.025, clip_s=0.1]")
                && long.contains("0.2")
        );
        let frames = e(LoaderConfig {
            local_frames: Some(0),
            ..base.clone()
        });
        assert!(
            frames.contains("local_frames") && frames.contains(">= 1"),
            "{frames}"
        );
        // The global views do not change when local crops are added.
        let plain = LoaderConfig {
            n_local: 0,
            ..base.clone()
        };
        let (a, b) = (take(&ds, plain, 2), take(&ds, base, 2));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.data, &x.start_s), (&y.data, &y.start_s));
            assert!(x.local.is_empty() && y.local.len() == 2 * 16 * 3 * 4);
        }
    }

    #[test]
    fn bad_arguments_name_expected_and_actual() {
        let ds = dataset("pipe-args", &[]);
        let e = |c: LoaderConfig| start_error(&ds, c);
        assert!(e(LoaderConfig {
            batch_size: 0,
            ..cfg(Mode::Train)
        })
        .contains("batch_size"));
        assert!(e(LoaderConfig {
            n_workers: 0,
            ..cfg(Mode::Train)
        })
        .contains("n_workers"));
        let msg = e(LoaderConfig {
            process_count: 3,
            ..cfg(Mode::Train)
        });
        assert!(
            msg.contains("multiple of process_count=3") && msg.contains("16"),
            "{msg}"
        );
    }

    /// A transform whose output has the wrong number of mel bins: a configuration error.
    struct WrongMels;
    impl Transform for WrongMels {
        fn apply(&mut self, _: &[u8], _: Crop) -> Result<crate::clip::Features> {
            Ok(crate::clip::Features {
                data: vec![0.0; 6],
                n_frames: 2,
                n_mels: 3,
                seeked: true,
                ..Default::default()
            })
        }
    }

    #[test]
    fn configuration_errors_stop_the_loader_and_stick() {
        let ds = dataset("pipe-fatal", &[]);
        let f: TransformFactory = Arc::new(|| Ok(Box::new(WrongMels) as Box<dyn Transform>));
        let mut p = Pipeline::start(ds, cfg(Mode::Train), f).unwrap();
        let e = p.next_batch().unwrap().err().unwrap().to_string();
        assert!(
            e.contains("n_mels") && e.contains("4 mel bins") && e.contains("3 mels"),
            "{e}"
        );
        let again = p.next_batch().unwrap().err().unwrap().to_string();
        assert!(again.contains("stopped after an error"), "{again}");
    }

    /// The debug transform, but a panic on the payload of row 5 (a bug in some transform).
    struct PanicsOnRow5(DebugTransform);
    impl Transform for PanicsOnRow5 {
        fn apply(&mut self, data: &[u8], crop: Crop) -> Result<crate::clip::Features> {
            assert!(data != payload(5).as_slice(), "boom on row 5");
            self.0.apply(data, crop)
        }
    }

    #[test]
    fn a_panicking_transform_fails_its_sample_not_the_loader() {
        let ds = dataset("pipe-panic", &[]);
        let f: TransformFactory = Arc::new(|| {
            Ok(
                Box::new(PanicsOnRow5(DebugTransform::new(6, 4, Duration::ZERO)))
                    as Box<dyn Transform>,
            )
        });
        let c = LoaderConfig {
            n_workers: 2,
            ..cfg(Mode::Eval)
        };
        let mut p = Pipeline::start(ds, c, f).unwrap();
        let batches: Vec<Batch> =
            std::iter::from_fn(|| p.next_batch().map(|b| b.unwrap())).collect();
        assert_eq!(batches.len(), 777_usize.div_ceil(16));
        let b = &batches[0]; // eval order: row 5 is in the first batch
        assert!(!b.valid[5] && b.valid.iter().filter(|v| !**v).count() == 1);
        assert!(
            b.failures.len() == 1
                && b.failures[0]
                    .error
                    .contains("transform panicked: boom on row 5"),
            "{:?}",
            b.failures
        );
        assert!(batches[1..].iter().all(|b| b.failures.is_empty()));
    }

    #[test]
    fn close_joins_quickly_with_a_slow_transform() {
        let ds = dataset("pipe-close", &[]);
        let mut p = Pipeline::start(
            ds,
            LoaderConfig {
                n_workers: 4,
                ..cfg(Mode::Train)
            },
            debug_factory(20),
        )
        .unwrap();
        let _ = p.next_batch();
        let t = std::time::Instant::now();
        p.close();
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }

    /// Three views of 0.1 s cut from one 0.215 s window (debug frames: 20 and 8), plus 2 local
    /// crops of 0.045 s (3 frames; more rows would be padding).
    fn window_cfg() -> LoaderConfig {
        LoaderConfig {
            n_views: 3,
            clip_s: 0.1,
            view_window_s: 0.215,
            n_local: 2,
            local_s: 0.045,
            local_frames: Some(3),
            ..cfg(Mode::Train)
        }
    }

    /// With `view_window_s`, the transform runs once per sample and each view is `clip_frames`
    /// consecutive frames of its window, at the offset the seed gives, with its start in seconds.
    #[test]
    fn window_views_are_frame_slices_of_one_transform_call() {
        let ds = dataset("pipe-window", &[]);
        let (window, clip) = (20, 8); // debug frames of 0.215 s and of 0.1 s
        let c = window_cfg();
        assert_eq!((c.debug_frames(), c.clip_frames()), (window, clip));
        assert_eq!(c.local_crop_frames(), 3);
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = calls.clone();
        let f: TransformFactory = Arc::new(move || {
            let t = DebugTransform::new(window, 4, Duration::ZERO);
            Ok(Box::new(Counting(t, counter.clone())) as _)
        });
        let mut p = Pipeline::start(ds, c.clone(), f).unwrap();
        let b = p.next_batch().unwrap().unwrap();
        let mut t = DebugTransform::new(window, 4, Duration::ZERO);
        let mut offsets = std::collections::HashSet::new();
        for (j, &index) in b.index.iter().enumerate() {
            let u = crate::order::crop_fraction(7, 0, index as u64, 1 << 32);
            let w = t.apply(&payload(index as u64), Crop::Fraction(u)).unwrap();
            for v in 0..3 {
                let off = (crate::order::crop_fraction(7, 0, index as u64, v) * 12.0).round();
                offsets.insert(off as usize);
                let got = &b.data[(v as usize * 16 + j) * 32..][..32];
                let want: Vec<f32> = w.data[off as usize * 4..][..32]
                    .iter()
                    .map(|x| (x - c.mean) * (1.0 / (2.0 * c.std)))
                    .collect();
                assert_eq!(got, &want[..], "sample {index} view {v}");
                let start = b.start_s[v as usize * 16 + j];
                assert!((start - (u + off * 0.01)).abs() < 1e-12, "{start}");
            }
            for l in 0..2u64 {
                let frac = crate::order::crop_fraction(7, 0, index as u64, 3 + l);
                let off = (frac * 17.0).round() as usize;
                let got = &b.local[(l as usize * 16 + j) * 12..][..12];
                let want: Vec<f32> = w.data[off * 4..][..12]
                    .iter()
                    .map(|x| (x - c.mean) * (1.0 / (2.0 * c.std)))
                    .collect();
                assert_eq!(got, &want[..], "sample {index} local {l}");
                let start = b.local_start_s[l as usize * 16 + j];
                assert!((start - (u + off as f64 * 0.01)).abs() < 1e-12, "{start}");
            }
        }
        assert!(offsets.len() > 5, "{offsets:?}");
        p.close(); // workers may have run ahead: compare once they have stopped
        assert_eq!(calls.load(Ordering::Relaxed), p.stats().decoded);
        assert!(p.stats().decoded >= 16);
    }

    /// Device features carry each sample's window and the crops `window_views_are_frame_slices_
    /// of_one_transform_call` cuts on the host: the same starts, offsets and kept frames, the
    /// window the transform gave (as float32 or int16), for any worker count and on resume;
    /// host features as bfloat16 are the float32 batch rounded to nearest even.
    #[test]
    fn device_features_carry_the_window_and_the_host_crops() {
        let ds = dataset("pipe-device", &[]);
        let host = LoaderConfig {
            transform: "debug".into(),
            ..window_cfg()
        };
        let start = |c: &LoaderConfig| {
            Pipeline::start(
                ds.clone(),
                c.clone(),
                crate::loader::transform_factory(c).unwrap(),
            )
            .unwrap()
        };
        let device = LoaderConfig {
            features: "device".into(),
            ..host.clone()
        };
        let n = device.wave_samples();
        assert_eq!(n, 6880); // 0.215 s at 32 kHz
        let b = start(&device).next_batch().unwrap().unwrap();
        let h = start(&host).next_batch().unwrap().unwrap();
        assert!(b.data.is_empty() && b.local.is_empty() && b.wave.len() == 16 * n);
        assert_eq!(
            (&b.index, &b.start_s, &b.local_start_s),
            (&h.index, &h.start_s, &h.local_start_s)
        );
        let mut t = DebugTransform::new(20, 4, Duration::ZERO).with_wave(Some(n));
        for (j, &index) in b.index.iter().enumerate() {
            let u = crate::order::crop_fraction(7, 0, index as u64, 1 << 32);
            let w = t.apply(&payload(index as u64), Crop::Fraction(u)).unwrap();
            assert_eq!(&b.wave[j * n..(j + 1) * n], &w.wave[..]);
            for v in 0..3u64 {
                let off = (crate::order::crop_fraction(7, 0, index as u64, v) * 12.0).round();
                assert_eq!(b.crop_start[v as usize * 16 + j], off as i32);
                assert_eq!(b.crop_frames[v as usize * 16 + j], 8);
            }
            for l in 0..2u64 {
                let frac = crate::order::crop_fraction(7, 0, index as u64, 3 + l);
                assert_eq!(
                    b.local_crop_start[l as usize * 16 + j],
                    (frac * 17.0).round() as i32
                );
                assert_eq!(b.local_crop_frames[l as usize * 16 + j], 3);
            }
        }
        // Worker counts and resume: the same windows and crops.
        let mut base = start(&LoaderConfig {
            n_workers: 1,
            ..device.clone()
        });
        let base: Vec<Batch> = (0..6)
            .map(|_| base.next_batch().unwrap().unwrap())
            .collect();
        let mut other = start(&LoaderConfig {
            n_workers: 5,
            start_step: 2,
            ..device.clone()
        });
        for want in &base[2..] {
            let got = other.next_batch().unwrap().unwrap();
            assert_eq!(
                (&got.index, &got.crop_start, &got.crop_frames),
                (&want.index, &want.crop_start, &want.crop_frames)
            );
            assert_eq!(
                got.wave.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.wave.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
        // int16: x * 32768 rounded; the debug wave is not 16-bit audio, so rounding is counted.
        let i16b = start(&LoaderConfig {
            wave_dtype: "int16".into(),
            ..device.clone()
        })
        .next_batch()
        .unwrap()
        .unwrap();
        assert!(i16b.wave.is_empty() && i16b.wave16.len() == 16 * n);
        for (q, x) in i16b.wave16.iter().zip(&b.wave) {
            assert_eq!(*q, (x * 32768.0).round_ties_even() as i16);
        }
        assert!(i16b.wave_rounded > 0 && i16b.wave_rounded <= (16 * n) as u64);
        // Host features as bfloat16.
        let hb = start(&LoaderConfig {
            batch_dtype: "bfloat16".into(),
            ..host.clone()
        })
        .next_batch()
        .unwrap()
        .unwrap();
        assert!(hb.data.is_empty() && hb.local.is_empty());
        assert_eq!(
            hb.data16,
            h.data
                .iter()
                .map(|&x| super::super::stages::bf16_bits(x))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            hb.local16,
            h.local
                .iter()
                .map(|&x| super::super::stages::bf16_bits(x))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn bf16_bits_round_to_nearest_even() {
        use super::super::stages::bf16_bits;
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_bits(-2.5), 0xc020);
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
        assert_eq!(bf16_bits(1.0 + 1.0 / 256.0), 0x3f80);
        // Just above halfway rounds up; 1 + 3 * 2^-8 is halfway to an odd one: up to even.
        assert_eq!(bf16_bits(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(bf16_bits(1.0 + 3.0 / 256.0), 0x3f82);
    }

    /// A transform that counts its calls.
    struct Counting(DebugTransform, Arc<std::sync::atomic::AtomicU64>);
    impl Transform for Counting {
        fn apply(&mut self, data: &[u8], crop: Crop) -> Result<crate::clip::Features> {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.apply(data, crop)
        }
    }
}
