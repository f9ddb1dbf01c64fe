//! Communicator setup, queries and process-wide options.

use super::config::{comm_config, env_config, CommExtras, DETERMINISTIC};
use super::memory_ranges::Registration;
use crate::acl::{bind_device, current_device, device_appeared};
use crate::guard::{hccl, non_null};
use crate::handles::Registry;
use crate::types::*;
use hccl_adapter::{HcclComm as Comm, HcclError, Result, RootInfo};
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What an `HcclComm` handle stands for.
pub(crate) struct CommEntry {
    /// The communicator.
    pub comm: Comm,
    /// Registered memory (HcclCommSetMemoryRange and friends).
    pub reg: Mutex<Registration>,
    /// Its live symmetric windows, by handle (`HcclCommSymWinGet`).
    pub windows: Mutex<Vec<(usize, hccl_adapter::SymWindow)>>,
    /// The ACL device it was created on (whose new streams run on its
    /// platform device; profiling that ACL device records it).
    pub acl_device: i32,
    /// The configuration fields recorded (and the symmetric-window bound).
    pub extras: CommExtras,
    /// Suspended (`HcclCommSuspend`): ops fail with `HCCL_E_SUSPENDING`.
    pub suspended: AtomicBool,
    /// `HcclCommWorkingDevNicSet`'s last request, by rank (recorded only).
    pub nic_backup: Mutex<Vec<(u32, bool)>>,
    /// Its fused compute/communication ops (`HcclRsMatmulReduceScatter`
    /// and friends), made at the first such call.
    pub fused: OnceLock<hccl_fused::Fused>,
}

impl CommEntry {
    /// `HCCL_E_SUSPENDING` while the communicator is suspended.
    pub(crate) fn check_active(&self) -> Result<()> {
        if self.suspended.load(Ordering::Acquire) {
            return Err(HcclError::suspending(format!(
                "communicator {} (rank {}) is suspended (HcclCommSuspend); HcclCommResume it first",
                self.comm.name(),
                self.comm.rank()
            )));
        }
        Ok(())
    }
}

pub(crate) static COMMS: Registry<CommEntry> = Registry::new(0x1c);

/// The communicator behind a handle: null → `HCCL_E_PTR`; destroyed or
/// unknown → `HCCL_E_PARA`.
pub(crate) fn lookup(h: HcclComm) -> Result<Arc<CommEntry>> {
    non_null(h, "comm")?;
    COMMS.get(h).ok_or_else(|| {
        HcclError::para(format!(
            "comm handle {h:p} is not a live communicator (destroyed, or not created by this library)"
        ))
    })
}

/// Registers a new communicator: this thread's device runs on its device.
fn publish(comm: Comm, extras: CommExtras, out: *mut HcclComm) -> Result<()> {
    let h = register(comm, current_device(), extras);
    // SAFETY: `out` was checked non-null by the caller; it points to an HcclComm.
    unsafe { out.write(h) };
    Ok(())
}

/// After `HcclRsCommRecover` made the communicator a new device: its ACL
/// device's new streams run there, and profiling hears of it.
pub(crate) fn rebind(entry: &CommEntry) {
    let dev = entry.comm.device();
    bind_device(entry.acl_device, &dev);
    device_appeared(
        entry.acl_device,
        &dev,
        Some(label(entry.acl_device, &entry.comm)),
    );
}

/// Registers `comm`, created on ACL device `acl_device`, whose new
/// streams then run on the communicator's platform device; returns its
/// handle. Profiling is told after the registration, so a profiling start
/// racing with it finds the communicator one way or the other.
fn register(comm: Comm, acl_device: i32, extras: CommExtras) -> HcclComm {
    bind_device(acl_device, &comm.device());
    let dev = comm.device().clone();
    let label = label(acl_device, &comm);
    let h = COMMS.insert(Arc::new(CommEntry {
        comm,
        reg: Mutex::new(Registration::default()),
        windows: Mutex::new(Vec::new()),
        acl_device,
        extras,
        suspended: AtomicBool::new(false),
        nic_backup: Mutex::new(Vec::new()),
        fused: OnceLock::new(),
    }));
    device_appeared(acl_device, &dev, Some(label));
    h
}

/// The platform devices of the live communicators created on ACL device
/// `acl_device`, each with its label (`device D: rank R of NAME`).
pub(crate) fn comm_devices_on(acl_device: i32) -> Vec<(hccl_adapter::Device, String)> {
    COMMS
        .all()
        .into_iter()
        .filter(|e| e.acl_device == acl_device)
        .map(|e| (e.comm.device().clone(), label(acl_device, &e.comm)))
        .collect()
}

/// How a communicator's device is named in a profile.
fn label(acl_device: i32, comm: &Comm) -> String {
    format!(
        "device {acl_device}: rank {} of {}",
        comm.rank(),
        comm.name()
    )
}

fn root_info(p: *const HcclRootInfo) -> Result<RootInfo> {
    non_null(p, "rootInfo")?;
    // SAFETY: non-null, points to an HcclRootInfo of HCCL_ROOT_INFO_BYTES bytes.
    let r = unsafe { &*p };
    Ok(RootInfo(r.internal.map(|b| b as u8)))
}

fn check_rank(n: u32, rank: u32) -> Result<()> {
    if n == 0 {
        return Err(HcclError::para("nRanks is 0"));
    }
    if rank >= n {
        return Err(HcclError::para(format!(
            "rank {rank} is out of range for {n} ranks"
        )));
    }
    Ok(())
}

/// `HcclGetRootInfo`.
#[no_mangle]
pub extern "C" fn HcclGetRootInfo(rootInfo: *mut HcclRootInfo) -> HcclResult {
    hccl("HcclGetRootInfo", || {
        non_null(rootInfo, "rootInfo")?;
        let r = Comm::get_root_info()?;
        // SAFETY: non-null, points to an HcclRootInfo (C contract).
        unsafe { (*rootInfo).internal = r.0.map(|b| b as c_char) };
        Ok(())
    })
}

/// `HcclCommInitRootInfo`.
#[no_mangle]
pub extern "C" fn HcclCommInitRootInfo(
    nRanks: u32,
    rootInfo: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    HcclCommInitRootInfoConfig(nRanks, rootInfo, rank, std::ptr::null(), comm)
}

/// `HcclCommInitRootInfoConfig`.
#[no_mangle]
pub extern "C" fn HcclCommInitRootInfoConfig(
    nRanks: u32,
    rootInfo: *const HcclRootInfo,
    rank: u32,
    config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult {
    hccl("HcclCommInitRootInfo", || {
        non_null(comm, "comm")?;
        let root = root_info(rootInfo)?;
        check_rank(nRanks, rank)?;
        let (cfg, extras) = comm_config(config)?;
        publish(
            Comm::init_root_info_with(nRanks, &root, rank, cfg)?,
            extras,
            comm,
        )
    })
}

/// `HcclCommInitClusterInfo`.
#[no_mangle]
pub extern "C" fn HcclCommInitClusterInfo(
    clusterInfo: *const c_char,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    HcclCommInitClusterInfoConfig(clusterInfo, rank, std::ptr::null_mut(), comm)
}

/// `HcclCommInitClusterInfoConfig`.
#[no_mangle]
pub extern "C" fn HcclCommInitClusterInfoConfig(
    clusterInfo: *const c_char,
    rank: u32,
    config: *mut HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult {
    hccl("HcclCommInitClusterInfo", || {
        non_null(comm, "comm")?;
        non_null(clusterInfo, "clusterInfo")?;
        // SAFETY: non-null, a NUL-terminated path (C contract).
        let path = unsafe { CStr::from_ptr(clusterInfo) }
            .to_str()
            .map_err(|_| HcclError::para("clusterInfo is not a UTF-8 path"))?;
        let (cfg, extras) = comm_config(config)?;
        publish(Comm::init_cluster_info_with(path, rank, cfg)?, extras, comm)
    })
}

/// `HcclCommInitAll`: rank i on device `devices[i]`.
#[no_mangle]
pub extern "C" fn HcclCommInitAll(
    ndev: u32,
    devices: *mut i32,
    comms: *mut HcclComm,
) -> HcclResult {
    hccl("HcclCommInitAll", || {
        non_null(devices, "devices")?;
        non_null(comms, "comms")?;
        if ndev == 0 {
            return Err(HcclError::para("ndev is 0"));
        }
        // SAFETY: non-null; the caller passes ndev device ids (C contract).
        let devs = unsafe { std::slice::from_raw_parts(devices, ndev as usize) }.to_vec();
        for (i, d) in devs.iter().enumerate() {
            if *d < 0 {
                return Err(HcclError::para(format!("devices[{i}] is {d}")));
            }
            if devs[..i].contains(d) {
                return Err(HcclError::para(format!("device {d} is listed twice")));
            }
        }
        let all = Comm::init_all_with(ndev, env_config()?)?;
        for (i, (c, d)) in all.into_iter().zip(devs).enumerate() {
            let h = register(c, d, CommExtras::default());
            // SAFETY: non-null; the caller provides room for ndev handles.
            unsafe { comms.add(i).write(h) };
        }
        Ok(())
    })
}

/// `HcclCreateSubCommConfig`.
#[no_mangle]
pub extern "C" fn HcclCreateSubCommConfig(
    comm: *mut HcclComm,
    rankNum: u32,
    rankIds: *mut u32,
    subCommId: u64,
    subCommRankId: u32,
    config: *mut HcclCommConfig,
    subComm: *mut HcclComm,
) -> HcclResult {
    hccl("HcclCreateSubCommConfig", || {
        non_null(comm, "comm")?;
        non_null(rankIds, "rankIds")?;
        non_null(subComm, "subComm")?;
        // SAFETY: non-null, points to an HcclComm handle (C contract).
        let parent = lookup(unsafe { *comm })?;
        if rankNum == 0 {
            return Err(HcclError::para("rankNum is 0"));
        }
        if rankNum > parent.comm.size() {
            return Err(HcclError::para(format!(
                "rankNum {rankNum} exceeds the parent's {} ranks",
                parent.comm.size()
            )));
        }
        // SAFETY: non-null; the caller passes rankNum ids (checked ≤ parent size).
        let ids = unsafe { std::slice::from_raw_parts(rankIds, rankNum as usize) }.to_vec();
        let (cfg, extras) = if config.is_null() {
            (
                parent.comm.communicator().config().clone(),
                parent.extras.clone(),
            )
        } else {
            comm_config(config)?
        };
        let sub = parent
            .comm
            .create_sub_comm_with(&ids, subCommId, subCommRankId, cfg)?;
        publish(sub, extras, subComm)
    })
}

/// `HcclRsCommShrink` (`hccl_ex.h`, NCCL's `ncclCommShrink`): the ranks
/// not in `excludeRanks` form `newComm` with the parent's configuration;
/// `excludeRanks` NULL with `excludeCount` 0: the ranks the survivors
/// agree are lost.
#[no_mangle]
pub extern "C" fn HcclRsCommShrink(
    comm: HcclComm,
    excludeRanks: *const u32,
    excludeCount: u32,
    newComm: *mut HcclComm,
) -> HcclResult {
    hccl("HcclRsCommShrink", || {
        let parent = lookup(comm)?;
        non_null(newComm, "newComm")?;
        let shrunk = if excludeRanks.is_null() {
            if excludeCount != 0 {
                return Err(HcclError::ptr(format!(
                    "excludeRanks is NULL with excludeCount {excludeCount}"
                )));
            }
            parent.comm.shrink_agreed()?
        } else {
            if excludeCount > parent.comm.size() {
                return Err(HcclError::para(format!(
                    "excludeCount {excludeCount} exceeds the communicator's {} ranks",
                    parent.comm.size()
                )));
            }
            // SAFETY: non-null; the caller passes excludeCount ranks
            // (checked at most the communicator's size).
            let ids = unsafe { std::slice::from_raw_parts(excludeRanks, excludeCount as usize) };
            parent.comm.shrink(ids)?
        };
        publish(shrunk, parent.extras.clone(), newComm)
    })
}

/// `HcclRsCommGrowId` (`hccl_ex.h`, NCCL's `ncclCommGrow`): one member
/// makes the single-use id of a grow; the new ranks join with it through
/// `HcclCommInitRootInfo`.
#[no_mangle]
pub extern "C" fn HcclRsCommGrowId(comm: HcclComm, growId: *mut HcclRootInfo) -> HcclResult {
    hccl("HcclRsCommGrowId", || {
        let c = lookup(comm)?;
        non_null(growId, "growId")?;
        let id = c.comm.grow_id()?;
        // SAFETY: non-null, points to an HcclRootInfo (C contract).
        unsafe { (*growId).internal = id.0.map(|b| b as c_char) };
        Ok(())
    })
}

/// `HcclRsCommGrow`: every member calls it, the id's maker passing the id
/// and the others NULL; members keep their ranks in `newComm` of `nRanks`.
#[no_mangle]
pub extern "C" fn HcclRsCommGrow(
    comm: HcclComm,
    nRanks: u32,
    growId: *const HcclRootInfo,
    newComm: *mut HcclComm,
) -> HcclResult {
    hccl("HcclRsCommGrow", || {
        let c = lookup(comm)?;
        non_null(newComm, "newComm")?;
        let id = if growId.is_null() {
            None
        } else {
            // SAFETY: non-null, points to an HcclRootInfo (C contract).
            let raw = unsafe { (*growId).internal };
            Some(hccl_adapter::RootInfo(raw.map(|b| b as u8)))
        };
        let grown = c.comm.grow(nRanks, id.as_ref())?;
        publish(grown, c.extras.clone(), newComm)
    })
}

/// `HcclCommDestroy`.
#[no_mangle]
pub extern "C" fn HcclCommDestroy(comm: HcclComm) -> HcclResult {
    hccl("HcclCommDestroy", || {
        lookup(comm)?;
        super::callbacks::notify(comm, HCCL_COMM_STATE_PHASE_DESTROY_PRE);
        let e = COMMS.remove(comm).ok_or_else(|| {
            HcclError::para(format!(
                "comm handle {comm:p} is not a live communicator (destroyed already?)"
            ))
        })?;
        drop(e);
        super::callbacks::notify(comm, HCCL_COMM_STATE_PHASE_DESTROY_POST);
        Ok(())
    })
}

/// `HcclGetRankSize`.
#[no_mangle]
pub extern "C" fn HcclGetRankSize(comm: HcclComm, rankSize: *mut u32) -> HcclResult {
    hccl("HcclGetRankSize", || {
        let c = lookup(comm)?;
        non_null(rankSize, "rankSize")?;
        // SAFETY: non-null, points to a uint32_t (C contract).
        unsafe { rankSize.write(c.comm.size()) };
        Ok(())
    })
}

/// `HcclGetRankId`.
#[no_mangle]
pub extern "C" fn HcclGetRankId(comm: HcclComm, rank: *mut u32) -> HcclResult {
    hccl("HcclGetRankId", || {
        let c = lookup(comm)?;
        non_null(rank, "rank")?;
        // SAFETY: non-null, points to a uint32_t (C contract).
        unsafe { rank.write(c.comm.rank()) };
        Ok(())
    })
}

/// `HcclGetCommName`: writes at most COMM_NAME_MAX_LENGTH bytes, NUL included.
#[no_mangle]
pub extern "C" fn HcclGetCommName(comm: HcclComm, commName: *mut c_char) -> HcclResult {
    hccl("HcclGetCommName", || {
        let c = lookup(comm)?;
        non_null(commName, "commName")?;
        let name = c.comm.name().as_bytes();
        let n = name.len().min(COMM_NAME_MAX_LENGTH - 1);
        // SAFETY: non-null; HCCL's contract gives room for COMM_NAME_MAX_LENGTH bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(name.as_ptr().cast::<c_char>(), commName, n);
            commName.add(n).write(0);
        }
        Ok(())
    })
}

/// `HcclGetCommAsyncError`: `HCCL_SUCCESS`, or what broke the communicator.
#[no_mangle]
pub extern "C" fn HcclGetCommAsyncError(comm: HcclComm, asyncError: *mut HcclResult) -> HcclResult {
    hccl("HcclGetCommAsyncError", || {
        let c = lookup(comm)?;
        non_null(asyncError, "asyncError")?;
        let code = c.comm.async_error().map_or(0, |e| e.code().code());
        // SAFETY: non-null, points to an HcclResult (C contract).
        unsafe { asyncError.write(code) };
        Ok(())
    })
}

/// `HcclGetErrorString`: HCCL's description of a code; unknown codes give
/// `"unknown error"`.
#[no_mangle]
pub extern "C" fn HcclGetErrorString(code: HcclResult) -> *const c_char {
    hccl_adapter::HcclResult::from_code(code)
        .map_or(c"unknown error", hccl_adapter::HcclResult::as_cstr)
        .as_ptr()
}

/// `HcclGetCommConfigCapability`: `HCCL_COMM_CONFIG_RESERVED` (12), as
/// HCCL: every field of the version-11 config is accepted (see
/// `config.rs` for which take effect and which are recorded).
#[no_mangle]
pub extern "C" fn HcclGetCommConfigCapability() -> u32 {
    HCCL_COMM_CONFIG_RESERVED
}

/// `HcclSetConfig`: `HCCL_DETERMINISTIC` = 0, 1 or 2 (strict), for
/// communicators created afterwards whose config does not set it.
#[no_mangle]
pub extern "C" fn HcclSetConfig(config: HcclConfig, configValue: HcclConfigValue) -> HcclResult {
    hccl("HcclSetConfig", || {
        if config != HCCL_DETERMINISTIC {
            return Err(HcclError::para(format!("unknown HcclConfig {config}")));
        }
        // SAFETY: the union's only member is an int32_t.
        let v = unsafe { configValue.value };
        if !(0..=2).contains(&v) {
            return Err(HcclError::para(format!(
                "HCCL_DETERMINISTIC must be 0, 1 or 2 (strict), not {v}"
            )));
        }
        DETERMINISTIC.store(v, Ordering::Relaxed);
        Ok(())
    })
}

/// `HcclGetConfig`: `HcclSetConfig`'s value, else the environment's
/// (`HCCL_DETERMINISTIC`: false 0, true 1, strict 2).
#[no_mangle]
pub extern "C" fn HcclGetConfig(
    config: HcclConfig,
    configValue: *mut HcclConfigValue,
) -> HcclResult {
    hccl("HcclGetConfig", || {
        if config != HCCL_DETERMINISTIC {
            return Err(HcclError::para(format!("unknown HcclConfig {config}")));
        }
        non_null(configValue, "configValue")?;
        let value = env_config()?.deterministic.code() as i32;
        // SAFETY: non-null, points to an HcclConfigValue (C contract).
        unsafe { configValue.write(HcclConfigValue { value }) };
        Ok(())
    })
}
