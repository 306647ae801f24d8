//! CEL device selectors, evaluated as upstream's DRA environment defines them
//! (`k8s.io/dynamic-resource-allocation/cel`): one variable `device` with
//! `driver`, `attributes` and `capacity`; attributes and capacity are maps
//! from domain to maps from name to value, a name without a domain belonging
//! to the driver's; looking up a domain the device lacks gives an empty map;
//! version attributes are semvers, capacities quantities. Evaluated with
//! cel-rust (the `cel` crate, through `kube-cel`) and kube-cel's Kubernetes
//! libraries.

use super::device::DraDevice;
use super::error::{CelError, ClaimError, ClaimErrorKind};
use kube_cel::KubeCelExt;
use kube_cel::cel::objects::Key;
use kube_cel::cel::{Context, Program, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Functions gputopo's evaluator has: cel-rust's standard functions and
/// macros, and kube-cel's quantity, semver, strings, lists, regex and sets
/// libraries. Operators (`_==_`, `@in`, …) are always accepted.
const FUNCTIONS: &[&str] = &[
    // CEL standard (cel-rust)
    "contains",
    "size",
    "max",
    "min",
    "startsWith",
    "endsWith",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "matches",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "duration",
    "timestamp",
    // Kubernetes quantity
    "quantity",
    "isQuantity",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "sign",
    "add",
    "sub",
    "isGreaterThan",
    "isLessThan",
    "compareTo",
    // Kubernetes semver
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    // Kubernetes strings, lists, regex, sets
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "reverse",
    "isSorted",
    "sum",
    "slice",
    "sort",
    "flatten",
    "distinct",
    "first",
    "last",
    "find",
    "findAll",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
];

/// A compiled selector, with where it came from for error messages.
#[derive(Clone, Debug)]
pub struct Selector {
    /// `ResourceClaim ns/name` or `DeviceClass name`.
    pub object: String,
    /// `spec.devices.requests[0].exactly.selectors[1].cel.expression`.
    pub field: String,
    pub expression: String,
    program: Arc<Program>,
    /// String literals of the expression: domains a lookup may name, which
    /// get an empty map when the device lacks them (upstream's default).
    literals: Vec<String>,
}

/// The longest selector expression, in bytes: the API server's own limit
/// (`CELSelectorExpressionMaxLength`, 10 KiB). A longer one cannot come from
/// a validated object, and parsing hundreds of KiB of nested brackets took
/// seconds (found by fuzzing).
pub const MAX_EXPRESSION_BYTES: usize = 10 * 1024;

/// The most `.`, `[` and `(` an expression may hold, string literals
/// included (counting them too keeps the guard simple and strict). Each is
/// one level of the parser's and the evaluator's recursion: a chain of 650
/// `.a` selections, 5 KiB, overflowed an 8 MiB stack (found by fuzzing),
/// and the API server's own recursion limit is 250.
pub const MAX_EXPRESSION_NESTING: usize = 200;

impl Selector {
    /// Parses `expression` and checks every function it calls is one the
    /// evaluator has; errors name `object` and `field`.
    pub fn compile(expression: &str, object: &str, field: String) -> Result<Selector, ClaimError> {
        if expression.len() > MAX_EXPRESSION_BYTES {
            return Err(ClaimError::new(
                object,
                &field,
                ClaimErrorKind::CelTooLong(expression.len()),
            ));
        }
        let nesting = expression
            .bytes()
            .filter(|b| matches!(b, b'.' | b'[' | b'('))
            .count();
        if nesting > MAX_EXPRESSION_NESTING {
            return Err(ClaimError::new(
                object,
                &field,
                ClaimErrorKind::CelTooDeep(nesting),
            ));
        }
        let program = Program::compile(expression).map_err(|e| {
            ClaimError::new(
                object,
                &field,
                ClaimErrorKind::CelSyntax(one_line(&e.to_string())),
            )
        })?;
        for function in program.references().functions() {
            let operator =
                function.starts_with('_') || function.starts_with('@') || function.starts_with('!');
            if !operator && !FUNCTIONS.contains(&function) {
                return Err(ClaimError::new(
                    object,
                    &field,
                    ClaimErrorKind::CelFunction(function.to_string()),
                ));
            }
        }
        Ok(Selector {
            object: object.to_string(),
            field,
            expression: expression.to_string(),
            program: Arc::new(program),
            literals: string_literals(expression),
        })
    }

    /// Whether the device matches. `Err` is a runtime error (a missing
    /// attribute looked up without `has()`, a wrong type, a non-bool result):
    /// upstream treats it as an error, not as "no match", and so does gputopo.
    pub fn matches(&self, env: &CelEnv, device: &DeviceValue) -> Result<bool, CelError> {
        let mut attributes = device.attributes.clone();
        let mut capacity = device.capacity.clone();
        for literal in &self.literals {
            attributes.entry(literal.clone()).or_default();
            capacity.entry(literal.clone()).or_default();
        }
        let to_map = |m: HashMap<String, HashMap<String, Value>>| -> Value {
            let outer: HashMap<Key, Value> = m
                .into_iter()
                .map(|(k, v)| (Key::from(k), Value::from(v)))
                .collect();
            Value::from(outer)
        };
        let mut dev: HashMap<String, Value> = HashMap::new();
        dev.insert(
            "driver".into(),
            Value::String(Arc::new(device.driver.clone())),
        );
        dev.insert("attributes".into(), to_map(attributes));
        dev.insert("capacity".into(), to_map(capacity));
        let mut ctx = env.base.new_inner_scope();
        ctx.add_variable_from_value("device", Value::from(dev));
        match self.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CelError::NotBool(format!("{other:?}"))),
            Err(e) => Err(CelError::Evaluation(e.to_string())),
        }
    }
}

/// The functions, registered once per decision.
pub struct CelEnv {
    base: Context<'static>,
}

impl Default for CelEnv {
    fn default() -> CelEnv {
        let mut base = Context::default();
        base.register_all();
        CelEnv { base }
    }
}

impl CelEnv {
    fn convert(&self, function: &str, text: &str) -> Result<Value, CelError> {
        let program = Program::compile(&format!("{function}(s)"))
            .map_err(|e| CelError::Evaluation(e.to_string()))?;
        let mut ctx = self.base.new_inner_scope();
        ctx.add_variable_from_value("s", Value::String(Arc::new(text.to_string())));
        program
            .execute(&ctx)
            .map_err(|e| CelError::Evaluation(e.to_string()))
    }
}

/// A device as the `device` variable presents it.
#[derive(Clone, Debug)]
pub struct DeviceValue {
    driver: String,
    attributes: HashMap<String, HashMap<String, Value>>,
    capacity: HashMap<String, HashMap<String, Value>>,
}

impl DeviceValue {
    /// `Err` when a version attribute is not a semantic version or a capacity
    /// not a quantity (the API server validates both, so this is rare).
    pub fn new(env: &CelEnv, device: &DraDevice) -> Result<DeviceValue, CelError> {
        let driver = device.id.driver.clone();
        let split = |name: &str| -> (String, String) {
            match name.split_once('/') {
                Some((domain, id)) => (domain.to_string(), id.to_string()),
                None => (driver.clone(), name.to_string()),
            }
        };
        let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
        for (name, a) in &device.attributes {
            let value = if let Some(v) = a.int {
                Value::Int(v)
            } else if let Some(v) = a.bool {
                Value::Bool(v)
            } else if let Some(v) = &a.string {
                Value::String(Arc::new(v.clone()))
            } else if let Some(v) = &a.version {
                env.convert("semver", v).map_err(|e| CelError::Version {
                    attribute: name.clone(),
                    value: v.clone(),
                    error: Box::new(e),
                })?
            } else {
                return Err(CelError::NoValue {
                    attribute: name.clone(),
                });
            };
            let (domain, id) = split(name);
            attributes.entry(domain).or_default().insert(id, value);
        }
        let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
        for (name, c) in &device.capacity {
            let value = env
                .convert("quantity", &c.value.0)
                .map_err(|e| CelError::Capacity {
                    capacity: name.clone(),
                    error: Box::new(e),
                })?;
            let (domain, id) = split(name);
            capacity.entry(domain).or_default().insert(id, value);
        }
        Ok(DeviceValue {
            driver,
            attributes,
            capacity,
        })
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The contents of the expression's quoted strings (escapes left as written,
/// which domain names never need).
fn string_literals(expression: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = expression.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' && c != '\'' {
            continue;
        }
        let mut literal = String::new();
        while let Some(d) = chars.next() {
            if d == '\\' {
                if let Some(e) = chars.next() {
                    literal.push(e);
                }
                continue;
            }
            if d == c {
                break;
            }
            literal.push(d);
        }
        out.push(literal);
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_past_the_nesting_limit_is_refused_before_parsing() {
        let deep = ".inf".repeat(650);
        let Err(e) = Selector::compile(&deep, "ResourceClaim ml/c", "f".into()) else {
            panic!("a 650-selection chain compiled");
        };
        assert_eq!(e.kind, ClaimErrorKind::CelTooDeep(650));
        assert_eq!(e.field, "f");
    }

    #[test]
    fn a_chain_at_the_nesting_limit_parses_on_a_small_stack() {
        // A tokio worker's stack (2 MiB), in a debug build: the worst case.
        let chain = format!("device{}", ".a".repeat(MAX_EXPRESSION_NESTING));
        let parsed = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || Selector::compile(&chain, "o", "f".into()).map(|_| ()))
            .expect("a thread")
            .join()
            .expect("no stack overflow");
        parsed.expect("a plain member chain is a valid expression");
    }

    #[test]
    fn literals_are_found() {
        assert_eq!(
            string_literals(r#"device.attributes["gpu.nvidia.com"].x == 'a\'b'"#),
            vec!["a'b".to_string(), "gpu.nvidia.com".to_string()]
        );
    }
}
