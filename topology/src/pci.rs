//! PCI bus ids in the forms NVML, nvidia-smi, sysfs and lspci print, read into
//! one address so every source agrees on one canonical text.

/// A PCI function address: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddress {
    /// Reads `00000000:17:00.0` (NVML, nvidia-smi), `0000:17:00.0` (sysfs),
    /// `17:00.0` (lspci without domain), in either case, and very old
    /// nvidia-smi's `domain:bus:device` form `0:2:0`.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let text = text.trim();
        let (rest, function) = match text.rsplit_once('.') {
            Some((rest, f)) => (rest, f),
            // Only the three-part old form may omit the function.
            None if text.matches(':').count() == 2 => (text, "0"),
            None => return None,
        };
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0", *b, *v),
            _ => return None,
        };
        let hex = |s: &str, max_digits: usize| -> Option<u32> {
            if s.is_empty() || s.len() > max_digits || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(s, 16).ok()
        };
        Some(PciAddress {
            domain: hex(domain, 8)?,
            bus: hex(bus, 2)? as u8,
            device: hex(device, 2).filter(|d| *d <= 0x1f)? as u8,
            function: hex(function, 1).filter(|f| *f <= 7)? as u8,
        })
    }

    /// `00000000:17:00.0`: the form gputopo stores (NVML's `busId`, lower-case).
    pub fn canonical(&self) -> String {
        format!(
            "{:08x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }

    /// `0000:17:00.0`: the directory name under `/sys/bus/pci/devices`.
    pub fn sysfs_name(&self) -> String {
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// The canonical text of a bus id in any accepted form; `None` when it is not one.
pub fn canonical_pci_bus_id(text: &str) -> Option<String> {
    PciAddress::parse(text).map(|a| a.canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_to_one_canonical_text() {
        for (given, want) in [
            ("00000000:17:00.0", "00000000:17:00.0"),
            ("0000:AB:1f.7", "00000000:ab:1f.7"),
            ("17:00.0", "00000000:17:00.0"),
            // Driver 270's `Bus Id : 0:2:0` is domain 0, bus 2, device 0.
            ("0:2:0", "00000000:02:00.0"),
            ("  00000001:C7:00.0 ", "00000001:c7:00.0"),
        ] {
            assert_eq!(
                canonical_pci_bus_id(given).as_deref(),
                Some(want),
                "{given}"
            );
        }
        let a = PciAddress::parse("00000000:1B:00.0").unwrap();
        assert_eq!(a.sysfs_name(), "0000:1b:00.0");
    }

    #[test]
    fn non_addresses_are_refused() {
        for bad in [
            "",
            "N/A",
            "17:00",
            "17:20.0",
            "17:00.8",
            "zz:00.0",
            "1:2:3:4.0",
            "123:00.0",
        ] {
            assert_eq!(canonical_pci_bus_id(bad), None, "{bad}");
        }
    }
}
