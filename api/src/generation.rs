//! A GPU's generation, from the product name the agent publishes
//! (`GpuTopology` `summary.product`, NVML's or amd-smi's name): a small
//! number that grows with each architecture, so the scheduler can prefer
//! the newest GPUs for training or keep them free (docs/contract.md,
//! "Filtering and scoring nodes"). A node label `gputopo.dev/gpu-generation`
//! overrides it for products this table does not know.
//!
//! NVIDIA, by architecture: Kepler 2, Pascal 3, Volta 4, Turing 5, Ampere 6,
//! Ada Lovelace 7, Hopper 8, Blackwell 9, Blackwell Ultra 10. AMD Instinct,
//! on its own scale (a pod's GPUs come from one vendor, so the two scales
//! never meet in one decision): MI50/MI60 5, MI100 (CDNA) 6, MI200 (CDNA 2)
//! 7, MI300 (CDNA 3) 8, MI350 (CDNA 4) 9. The product names and their
//! architectures are the vendors' own datasheets'.

/// The most a generation may be (the label's upper bound).
pub const MAX_GENERATION: u8 = 99;

/// The generation of `product`, or `None` for a name the table does not know.
pub fn generation_of(product: &str) -> Option<u8> {
    let upper = product.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    for (name, generation) in [("BLACKWELL", 9), ("HOPPER", 8), ("ADA", 7), ("AMPERE", 6)] {
        if has(name) {
            return Some(generation);
        }
    }
    for word in &words {
        if let Some(g) = datacenter(word) {
            return Some(g);
        }
    }
    geforce_or_quadro(&words)
}

/// Data-centre boards, named by one word of the product.
fn datacenter(word: &str) -> Option<u8> {
    let g = match word {
        "GB300" | "B300" => 10,
        "GB200" | "B200" | "B100" | "B40" => 9,
        "GH200" | "H200" | "H100" | "H800" | "H20" | "H100L" | "H100NVL" => 8,
        "L4" | "L40" | "L40S" | "L40G" | "L20" | "L2" => 7,
        "A100" | "A800" | "A40" | "A30" | "A10" | "A10G" | "A16" | "A2" => 6,
        "T4" | "T4G" => 5,
        "V100" | "V100S" => 4,
        "P100" | "P40" | "P4" | "P6" => 3,
        "K80" | "K40" | "K20" => 2,
        "MI355X" | "MI350X" | "MI355" | "MI350" => 9,
        "MI325X" | "MI308X" | "MI300X" | "MI300A" | "MI300" => 8,
        "MI250X" | "MI250" | "MI210" => 7,
        "MI100" => 6,
        "MI60" | "MI50" => 5,
        // RTX A6000, A5000, A4500, A4000, A2000: workstation Ampere.
        w if w.len() == 5 && w.starts_with('A') && w[1..].bytes().all(|b| b.is_ascii_digit()) => 6,
        _ => return None,
    };
    Some(g)
}

/// GeForce and Quadro names: `RTX 4090`, `GTX 1080 Ti`, `Quadro RTX 8000`.
fn geforce_or_quadro(words: &[&str]) -> Option<u8> {
    let at = words.iter().position(|w| *w == "RTX" || *w == "GTX")?;
    let model = words.get(at + 1)?;
    if model.len() != 4 || !model.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Quadro RTX 4000-8000 are Turing, whatever their digits suggest.
    if words.contains(&"QUADRO") {
        return Some(5);
    }
    match &model[..2] {
        "10" => Some(3),
        "16" | "20" => Some(5),
        "30" => Some(6),
        "40" => Some(7),
        "50" => Some(9),
        _ => None,
    }
}

/// The most NVLinks one GPU of `product` has, where the vendor's datasheet
/// says and the table knows the product (`None` otherwise): a `GpuTopology`
/// claiming more between two of its GPUs is not believed. Boards without
/// NVLink say 0.
pub fn max_nvlinks(product: &str) -> Option<u32> {
    let upper = product.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().find_map(|w| {
        Some(match *w {
            "P100" => 4,
            "V100" | "V100S" => 6,
            "A100" | "A800" => 12,
            "A40" | "A30" | "A6000" | "A5000" | "A4500" => 4,
            "H100" | "H800" | "H200" | "H20" | "GH200" | "H100NVL" => 18,
            "B100" | "B200" | "GB200" | "B300" | "GB300" => 18,
            "T4" | "L4" | "L40" | "L40S" | "L20" | "A10" | "A10G" | "A16" | "A2" => 0,
            _ => return None,
        })
    })
}

/// The node label's value as a generation: `1..=99`.
pub fn parse_generation_label(value: &str) -> Option<u8> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u8>()
        .ok()
        .filter(|g| (1..=MAX_GENERATION).contains(g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_as_nvml_and_amd_smi_print_them() {
        let cases: &[(&str, Option<u8>)] = &[
            ("NVIDIA A100-SXM4-80GB", Some(6)),
            ("NVIDIA A10", Some(6)),
            ("NVIDIA A10G", Some(6)),
            ("Tesla V100-SXM2-32GB", Some(4)),
            ("NVIDIA H100 80GB HBM3", Some(8)),
            ("NVIDIA H200", Some(8)),
            ("NVIDIA H20", Some(8)),
            ("NVIDIA GH200 480GB", Some(8)),
            ("NVIDIA B200", Some(9)),
            ("NVIDIA GB200", Some(9)),
            ("NVIDIA GB300", Some(10)),
            ("NVIDIA L40S", Some(7)),
            ("NVIDIA L4", Some(7)),
            ("Tesla T4", Some(5)),
            ("Tesla P100-PCIE-16GB", Some(3)),
            ("NVIDIA GeForce RTX 4090", Some(7)),
            ("NVIDIA GeForce RTX 3090", Some(6)),
            ("NVIDIA GeForce RTX 5090", Some(9)),
            ("NVIDIA GeForce GTX 1080 Ti", Some(3)),
            ("Quadro RTX 8000", Some(5)),
            ("NVIDIA RTX A6000", Some(6)),
            ("NVIDIA RTX 6000 Ada Generation", Some(7)),
            ("NVIDIA RTX PRO 6000 Blackwell Server Edition", Some(9)),
            ("AMD Instinct MI300X", Some(8)),
            ("AMD Instinct MI325X", Some(8)),
            ("AMD Instinct MI250X", Some(7)),
            ("AMD Instinct MI210", Some(7)),
            ("AMD Instinct MI100", Some(6)),
            ("AMD Instinct MI355X", Some(9)),
            ("Some Future Accelerator", None),
            ("", None),
        ];
        for (product, want) in cases {
            assert_eq!(generation_of(product), *want, "{product}");
        }
    }

    #[test]
    fn nvlink_maxima_come_from_known_products_only() {
        assert_eq!(max_nvlinks("NVIDIA A100-SXM4-80GB"), Some(12));
        assert_eq!(max_nvlinks("Tesla V100-SXM2-32GB"), Some(6));
        assert_eq!(max_nvlinks("NVIDIA H100 80GB HBM3"), Some(18));
        assert_eq!(max_nvlinks("NVIDIA L40S"), Some(0));
        assert_eq!(max_nvlinks("AMD Instinct MI300X"), None);
        assert_eq!(max_nvlinks("Some Future Accelerator"), None);
    }

    #[test]
    fn the_label_takes_a_small_whole_number() {
        assert_eq!(parse_generation_label("9"), Some(9));
        assert_eq!(parse_generation_label(" 12 "), Some(12));
        for bad in ["0", "100", "-1", "nine", "9.5", ""] {
            assert_eq!(parse_generation_label(bad), None, "{bad}");
        }
    }
}
