//! A network interface's offload features, read as `ethtool -k` reads them: the kernel's
//! ethtool ioctl (`SIOCETHTOOL`) with `ETHTOOL_GSSET_INFO` (how many features), `ETHTOOL_GSTRINGS`
//! (their names) and `ETHTOOL_GFEATURES` (which are active). See netdev-features.rst.

use super::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// `struct ifreq` with the `ifr_data` member of its union (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// `ioctl(sock, SIOCETHTOOL, {ifname, data})`: `data` is an ethtool command structure whose
/// first `u32` is the command, with room for what the command writes back.
fn ethtool(sock: &OwnedFd, ifname: &str, data: &mut [u64]) -> io::Result<()> {
    let mut req = IfReq {
        name: [0; 16],
        data: data.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    let n = ifname.len();
    if n >= req.name.len() || ifname.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    req.name[..n].copy_from_slice(ifname.as_bytes());
    // SAFETY: `req` is a live ifreq whose data pointer points at `data`, which the caller
    // sized for the command's reply; the kernel writes only within it.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) }).map(drop)
}

/// Every named offload feature of `ifname` and whether it is active (what `ethtool -k`
/// prints as on or off).
pub fn features(ifname: &str) -> io::Result<Vec<(String, bool)>> {
    // SAFETY: socket(2) returns a new descriptor or -1, checked by cvt.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a descriptor just returned to us and owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[1]; }
    let mut info = [0u64; 3];
    info[0] = u64::from(ETHTOOL_GSSET_INFO);
    info[1] = 1 << ETH_SS_FEATURES;
    ethtool(&sock, ifname, &mut info)?;
    let count = (info[2] & 0xffff_ffff) as usize;
    if info[1] == 0 || count == 0 || count > 4096 {
        return Ok(Vec::new());
    }
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[len * 32]; }
    let mut strings = vec![0u64; (12 + count * ETH_GSTRING_LEN).div_ceil(8)];
    strings[0] = u64::from(ETHTOOL_GSTRINGS) | (u64::from(ETH_SS_FEATURES) << 32);
    strings[1] = count as u64;
    ethtool(&sock, ifname, &mut strings)?;
    let names: Vec<String> = {
        let bytes: Vec<u8> = strings.iter().flat_map(|w| w.to_ne_bytes()).collect();
        bytes[12..12 + count * ETH_GSTRING_LEN]
            .chunks(ETH_GSTRING_LEN)
            .map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect()
    };
    // struct ethtool_gfeatures { u32 cmd; u32 size; struct { u32 available, requested,
    // active, never_changed; } features[size]; }
    let blocks = count.div_ceil(32);
    let mut feats = vec![0u64; 1 + blocks * 2];
    feats[0] = u64::from(ETHTOOL_GFEATURES) | ((blocks as u64) << 32);
    ethtool(&sock, ifname, &mut feats)?;
    let words: Vec<u32> = feats
        .iter()
        .flat_map(|w| [*w as u32, (*w >> 32) as u32])
        .collect();
    let active = |i: usize| words[2 + (i / 32) * 4 + 2] & (1 << (i % 32)) != 0;
    Ok(names
        .into_iter()
        .enumerate()
        .filter(|(_, n)| !n.is_empty())
        .map(|(i, n)| (n, active(i)))
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_offers_scatter_gather_and_names_its_features() {
        let f = super::features("lo").expect("lo exists on every Linux host");
        let on = |n: &str| f.iter().find(|(x, _)| x == n).map(|(_, a)| *a);
        assert!(f.len() > 20, "{f:?}");
        // Loopback copies nothing to a device: it takes scatter-gather and skips checksums.
        assert_eq!(on("tx-scatter-gather"), Some(true), "{f:?}");
        assert!(on("tx-udp-segmentation").is_some(), "{f:?}");
        assert!(super::features("no-such-if0").is_err());
    }
}
