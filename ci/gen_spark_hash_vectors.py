"""Regenerates crates/weir-types/tests/data/spark_hash_vectors.json with real PySpark.

Each vector is a list of typed key columns and the value of Spark's
``hash(...)`` over them, so the Rust implementation can be checked against
the JVM bit for bit. Run: ``.venv/bin/python ci/gen_spark_hash_vectors.py``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import types as T

OUT = Path(__file__).resolve().parent.parent / "crates/weir-types/tests/data/spark_hash_vectors.json"


def cases() -> list[list[tuple[str, object]]]:
    rng = random.Random(7)
    ints = [0, 1, -1, 42, 2**31 - 1, -(2**31)] + [rng.randint(-(2**31), 2**31 - 1) for _ in range(40)]
    longs = [0, 1, -1, 2**63 - 1, -(2**63), 2654435761]
    longs += [rng.randint(-(2**63), 2**63 - 1) for _ in range(40)]
    texts = ["", "a", "ab", "abc", "abcd", "abcde", "héllo", "日本語テキスト", "\u00ff\u0080"] + [
        "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(0, 23))) for _ in range(40)
    ]
    blobs = [b"", b"\x00", b"\xff", b"\x80\x81\x82", b"\xff\xfe\xfd\xfc\xfb"] + [
        bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 19))) for _ in range(30)
    ]
    doubles = [0.0, -0.0, 1.5, -2.25, float("inf"), float("nan"), 1e300]
    out: list[list[tuple[str, object]]] = []
    out += [[("int", v)] for v in ints]
    out += [[("long", v)] for v in longs]
    out += [[("string", v)] for v in texts]
    out += [[("binary", v)] for v in blobs]
    out += [[("double", v)] for v in doubles]
    out += [[("boolean", v)] for v in (True, False)]
    out += [[("long", None)], [("string", None), ("int", 5)]]
    for _ in range(40):
        out.append([("long", rng.choice(longs)), ("string", rng.choice(texts)), ("int", rng.choice(ints))])
    return out


def main() -> int:
    spark = SparkSession.builder.master("local[1]").appName("hash-vectors").getOrCreate()
    spark_types = {
        "int": T.IntegerType(),
        "long": T.LongType(),
        "string": T.StringType(),
        "binary": T.BinaryType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
    }
    vectors = []
    for case in cases():
        schema = T.StructType([T.StructField(f"c{i}", spark_types[t], True) for i, (t, _) in enumerate(case)])
        row = tuple(bytearray(v) if t == "binary" and v is not None else v for t, v in case)
        df = spark.createDataFrame([row], schema)
        (h,) = df.selectExpr(f"hash({', '.join(f'c{i}' for i in range(len(case)))})").first()
        columns = []
        for t, v in case:
            if t == "binary" and v is not None:
                v = v.hex()
            elif t == "double" and v is not None and (v != v or v in (float("inf"),)):
                v = repr(v)
            elif t == "double" and v == 0.0:
                v = "-0.0" if str(v).startswith("-") else 0.0
            columns.append({"type": t, "value": v})
        vectors.append({"columns": columns, "hash": h})
    spark.stop()
    OUT.write_text(json.dumps(vectors, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(vectors)} vectors to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
