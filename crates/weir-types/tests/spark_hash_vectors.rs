//! Spark's `hash` computed by real PySpark (see `ci/gen_spark_hash_vectors.py`)
//! must equal Weir's, bit for bit, for every type and for chained columns.

use serde_json::Value as Json;
use weir_types::{MaxParallelism, Value, hash_values, key_group_of};

fn column(c: &Json) -> Value {
    let v = &c["value"];
    if v.is_null() {
        return Value::Null;
    }
    match c["type"].as_str().expect("type is a string") {
        "int" => Value::Int32(i32::try_from(v.as_i64().expect("int")).expect("fits i32")),
        "long" => Value::Int64(v.as_i64().expect("long")),
        "string" => Value::Utf8(v.as_str().expect("string").to_owned()),
        "binary" => {
            let hex = v.as_str().expect("hex string");
            Value::Binary(
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                    .collect(),
            )
        }
        "double" => Value::Float64(match v {
            Json::String(s) => s.parse().expect("special double"),
            n => n.as_f64().expect("double"),
        }),
        "boolean" => Value::Boolean(v.as_bool().expect("bool")),
        other => panic!("unknown type {other} in test data"),
    }
}

#[test]
fn weir_hash_matches_pyspark() {
    let data = include_str!("data/spark_hash_vectors.json");
    let vectors: Vec<Json> = serde_json::from_str(data).expect("valid test data");
    assert!(vectors.len() > 200, "test data is incomplete");
    let max = MaxParallelism::new(128).expect("valid");
    for v in &vectors {
        let cols: Vec<Value> = v["columns"]
            .as_array()
            .expect("columns")
            .iter()
            .map(column)
            .collect();
        let expected = i32::try_from(v["hash"].as_i64().expect("hash")).expect("fits i32");
        assert_eq!(hash_values(&cols), expected, "hash of {cols:?}");
        assert_eq!(
            i64::from(key_group_of(&cols, max).0),
            i64::from(expected).rem_euclid(128),
            "key group of {cols:?}"
        );
    }
}
