//! How things look on a terminal and in JSON: tables, sizes, times, keys
//! and decoded values. No I/O.

use comfy_table::{Table, presets};
use weir_types::{Value, ValueType};

/// A table with `header`, drawn with plain ASCII so it survives any
/// terminal, pager or log file.
pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_style(presets::ASCII_FULL_CONDENSED);
    table.set_header(header.iter().copied());
    table
}

/// A byte count for humans: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `1 file`, `2 files`, `1 entry`, `3 entries`.
pub fn count(n: u64, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        (_, None) => format!("{n} {noun}s"),
    }
}

/// Unix milliseconds as an RFC 3339 UTC time, e.g. `2026-11-22T05:40:01.250Z`.
pub fn time(millis: u64) -> String {
    let secs = millis / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        millis % 1000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`); avoids a date crate for one conversion.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Bytes as lowercase hex with a `0x` prefix, in full.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    out.push_str("0x");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A decoded key as `dump` prints it and `--key` matches it: the column's
/// value for one column, `(a, b)` for several.
pub fn key(columns: &[Value]) -> String {
    match columns {
        [one] => one.to_string(),
        many => {
            let parts: Vec<String> = many.iter().map(Value::to_string).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// The same key with string columns unquoted, so `--key alice` finds the
/// key printed as `"alice"`.
pub fn key_unquoted(columns: &[Value]) -> String {
    let plain = |v: &Value| match v {
        Value::Utf8(s) => s.clone(),
        other => other.to_string(),
    };
    match columns {
        [one] => plain(one),
        many => {
            let parts: Vec<String> = many.iter().map(plain).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// A decoded value as JSON, struct fields named by `ty`. Binary is hex in
/// full; floats JSON cannot hold (NaN, infinities) become strings.
pub fn value_json(value: &Value, ty: &ValueType) -> serde_json::Value {
    use serde_json::Value as Json;
    match (value, ty) {
        (Value::Null, _) => Json::Null,
        (Value::Boolean(b), _) => Json::Bool(*b),
        (Value::Int32(v), _) => Json::from(*v),
        (Value::Int64(v), _) => Json::from(*v),
        (Value::Float32(v), _) => float_json(f64::from(*v)),
        (Value::Float64(v), _) => float_json(*v),
        (Value::Utf8(s), _) => Json::String(s.clone()),
        (Value::Binary(b), _) => Json::String(hex(b)),
        (Value::List(items), ValueType::List { item }) => {
            Json::Array(items.iter().map(|v| value_json(v, item)).collect())
        }
        (Value::List(items), other) => {
            Json::Array(items.iter().map(|v| value_json(v, other)).collect())
        }
        (Value::Struct(values), ValueType::Struct { fields }) => Json::Object(
            fields
                .iter()
                .zip(values)
                .map(|(f, v)| (f.name.clone(), value_json(v, &f.data_type)))
                .collect(),
        ),
        (Value::Struct(values), other) => {
            Json::Array(values.iter().map(|v| value_json(v, other)).collect())
        }
    }
}

fn float_json(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v)
        .map(serde_json::Value::Number)
        .unwrap_or_else(|| serde_json::Value::String(v.to_string()))
}

#[cfg(test)]
mod tests {
    use weir_types::Field;

    use super::*;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 << 20), "5.0 MiB");
    }

    #[test]
    fn counts_agree_in_number() {
        assert_eq!(count(1, "entry"), "1 entry");
        assert_eq!(count(0, "entry"), "0 entries");
        assert_eq!(count(2, "file"), "2 files");
    }

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(951_782_400_250), "2000-02-29T00:00:00.250Z");
        assert_eq!(time(1_795_318_801_007), "2026-11-22T03:40:01.007Z");
    }

    #[test]
    fn keys_print_and_match() {
        let k = [Value::Int64(1), Value::Utf8("x".into())];
        assert_eq!(key(&k), "(1, \"x\")");
        assert_eq!(key_unquoted(&k), "(1, x)");
        assert_eq!(key(&[Value::Utf8("alice".into())]), "\"alice\"");
    }

    #[test]
    fn structs_become_objects() {
        let ty = ValueType::Struct {
            fields: vec![
                Field::new("n", ValueType::Int64, false),
                Field::new("avg", ValueType::Float64, true),
                Field::new("blob", ValueType::Binary, true),
            ],
        };
        let v = Value::Struct(vec![
            Value::Int64(2),
            Value::Float64(f64::NAN),
            Value::Binary(vec![1, 255]),
        ]);
        assert_eq!(
            value_json(&v, &ty),
            serde_json::json!({"n": 2, "avg": "NaN", "blob": "0x01ff"})
        );
    }
}
