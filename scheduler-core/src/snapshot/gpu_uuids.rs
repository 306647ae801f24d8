//! A node's GPU UUIDs, packed into 16 bytes each where they read back
//! exactly.

/// A node's GPU UUIDs. They are unique per GPU, so they cannot be shared
/// between nodes like the rest of a topology; the usual
/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` form is kept as 16 bytes.
#[derive(Clone, Debug, Default)]
pub(crate) enum GpuUuids {
    /// The topology names none.
    #[default]
    None,
    /// Every named UUID is canonical lowercase: bit i of `named` says GPU i has one.
    Packed { named: u32, ids: Box<[u128]> },
    /// Per GPU index, as written.
    Text(Box<[Option<Box<str>>]>),
}

impl GpuUuids {
    /// From per-index UUIDs (index = GPU index).
    pub(crate) fn new(uuids: &[Option<&str>]) -> GpuUuids {
        if uuids.iter().all(Option::is_none) {
            return GpuUuids::None;
        }
        let packed: Option<Vec<u128>> = uuids
            .iter()
            .map(|u| match u {
                None => Some(0),
                Some(text) => pack_uuid(text),
            })
            .collect();
        match packed {
            Some(ids) if uuids.len() <= 32 => GpuUuids::Packed {
                named: uuids
                    .iter()
                    .enumerate()
                    .filter(|(_, u)| u.is_some())
                    .fold(0, |m, (i, _)| m | (1 << i)),
                ids: ids.into_boxed_slice(),
            },
            _ => GpuUuids::Text(uuids.iter().map(|u| u.map(Box::from)).collect()),
        }
    }

    pub(crate) fn get(&self, gpu: u32) -> Option<String> {
        match self {
            GpuUuids::None => None,
            GpuUuids::Packed { named, ids } => (gpu < 32 && named & (1 << gpu) != 0)
                .then(|| ids.get(gpu as usize).map(|&id| unpack_uuid(id)))
                .flatten(),
            GpuUuids::Text(texts) => texts
                .get(gpu as usize)
                .and_then(|t| t.as_deref().map(str::to_string)),
        }
    }
}

/// `GPU-8-4-4-4-12` lowercase hex as 128 bits; `None` for any other form
/// (kept as text so it reads back exactly as written).
fn pack_uuid(text: &str) -> Option<u128> {
    let rest = text.strip_prefix("GPU-")?;
    let groups: Vec<&str> = rest.split('-').collect();
    let lengths = [8, 4, 4, 4, 12];
    if groups.len() != 5 || groups.iter().zip(lengths).any(|(g, n)| g.len() != n) {
        return None;
    }
    let hex: String = groups.concat();
    if !hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

fn unpack_uuid(id: u128) -> String {
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (id >> 96) as u32,
        (id >> 80) as u16,
        (id >> 64) as u16,
        (id >> 48) as u16,
        id & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_pack_only_when_they_read_back_exactly() {
        let canonical = "GPU-41000001-0000-4000-8000-00000000000a";
        let upper = "GPU-41000001-0000-4000-8000-00000000000A";
        let odd = "MIG-GPU-41000001";
        let packed = GpuUuids::new(&[Some(canonical), None]);
        assert!(matches!(packed, GpuUuids::Packed { .. }));
        assert_eq!(packed.get(0).as_deref(), Some(canonical));
        assert_eq!(packed.get(1), None);
        assert_eq!(packed.get(7), None);
        for text in [upper, odd] {
            let kept = GpuUuids::new(&[Some(canonical), Some(text)]);
            assert!(matches!(kept, GpuUuids::Text(_)));
            assert_eq!(kept.get(1).as_deref(), Some(text));
        }
        assert!(matches!(GpuUuids::new(&[None, None]), GpuUuids::None));
    }
}
