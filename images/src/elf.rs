//! The two facts the image check needs from a binary: which machine it is
//! for, and which dynamic loader (PT_INTERP) it asks for, if any. Only
//! 64-bit little-endian ELF, which is what amd64 and arm64 Linux run.

use crate::Error;

const PT_INTERP: u32 = 3;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfFacts {
    /// `e_machine`: 62 for x86-64, 183 for AArch64.
    pub machine: u16,
    /// The loader's path for a dynamic binary; none for a static one.
    pub interpreter: Option<String>,
}

pub fn read(path: &str, bytes: &[u8]) -> Result<ElfFacts, Error> {
    let bad = |what: &str| Error::Elf {
        path: path.to_string(),
        what: what.to_string(),
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err(bad("no ELF header"));
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err(bad("not 64-bit little-endian"));
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    let machine = u16_at(18);
    let phoff = u64_at(32).ok_or_else(|| bad("truncated header"))? as usize;
    let phentsize = usize::from(u16_at(54));
    let phnum = usize::from(u16_at(56));
    let mut interpreter = None;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let p_type = u32_at(ph).ok_or_else(|| bad("program headers past the end"))?;
        if p_type != PT_INTERP {
            continue;
        }
        let offset = u64_at(ph + 8).ok_or_else(|| bad("truncated PT_INTERP"))? as usize;
        let size = u64_at(ph + 32).ok_or_else(|| bad("truncated PT_INTERP"))? as usize;
        let raw = bytes
            .get(offset..offset.saturating_add(size))
            .ok_or_else(|| bad("PT_INTERP past the end"))?;
        let text = raw.split(|&b| b == 0).next().unwrap_or_default();
        interpreter = Some(String::from_utf8_lossy(text).into_owned());
    }
    Ok(ElfFacts {
        machine,
        interpreter,
    })
}

/// A minimal ELF image with the given machine and loader, for tests of the
/// checks that read them (no real binary needed).
pub fn fake(machine: u16, interpreter: Option<&str>) -> Vec<u8> {
    let mut out = vec![0u8; 64];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2; // ELFCLASS64
    out[5] = 1; // little-endian
    out[6] = 1; // EV_CURRENT
    out[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    out[18..20].copy_from_slice(&machine.to_le_bytes());
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    if let Some(interp) = interpreter {
        let ph_at = 64u64;
        let text_at = ph_at + 56;
        out[32..40].copy_from_slice(&ph_at.to_le_bytes());
        out[54..56].copy_from_slice(&56u16.to_le_bytes());
        out[56..58].copy_from_slice(&1u16.to_le_bytes());
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&PT_INTERP.to_le_bytes());
        ph[8..16].copy_from_slice(&text_at.to_le_bytes());
        let len = interp.len() as u64 + 1;
        ph[32..40].copy_from_slice(&len.to_le_bytes());
        ph[40..48].copy_from_slice(&len.to_le_bytes());
        out.extend(ph);
        out.extend(interp.as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_machine_and_loader_back_from_a_fake() {
        let dynamic = read("dyn", &fake(183, Some("/lib/ld-linux-aarch64.so.1"))).unwrap();
        assert_eq!(dynamic.machine, 183);
        assert_eq!(
            dynamic.interpreter.as_deref(),
            Some("/lib/ld-linux-aarch64.so.1")
        );
        let fixed = read("static", &fake(62, None)).unwrap();
        assert_eq!(
            fixed,
            ElfFacts {
                machine: 62,
                interpreter: None
            }
        );
    }

    #[test]
    fn refuses_what_is_not_elf64_le() {
        let err = read("script", b"#!/bin/sh\necho hi\n").unwrap_err();
        assert!(err.to_string().contains("no ELF header"), "{err}");
        let mut elf32 = fake(62, None);
        elf32[4] = 1;
        let err = read("elf32", &elf32).unwrap_err();
        assert!(err.to_string().contains("64-bit"), "{err}");
    }

    #[test]
    fn the_host_test_binary_is_read() {
        // This very test binary: real ELF, for the host's machine.
        let me = std::env::current_exe().unwrap();
        let facts = read("self", &std::fs::read(me).unwrap()).unwrap();
        let expected = if cfg!(target_arch = "x86_64") {
            62
        } else {
            183
        };
        assert_eq!(facts.machine, expected);
    }
}
