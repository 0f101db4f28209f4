//! The Sparkplug B payload (`org.eclipse.tahu.protobuf.Payload`, proto2), written out from the
//! Sparkplug 3.0 specification with prost's derive macros: no `protoc` at build time.
//!
//! Only what an edge node sends and reads is declared: the payload, its metrics, and their
//! property sets. The rest of the schema (templates, data sets, metadata, nested property
//! sets) never leaves this node; when a host sends it, prost skips the unknown fields, so a
//! command carrying one decodes to a metric without a value and is refused as such.

use prost::Message as _;

/// The `DataType` numbers of the specification that this node uses or accepts.
pub mod datatype {
    /// Signed 8-bit integer (in `int_value`).
    pub const INT8: u32 = 1;
    /// Signed 16-bit integer (in `int_value`).
    pub const INT16: u32 = 2;
    /// Signed 32-bit integer (in `int_value`).
    pub const INT32: u32 = 3;
    /// Signed 64-bit integer (in `long_value`).
    pub const INT64: u32 = 4;
    /// Unsigned 8-bit integer (in `int_value`).
    pub const UINT8: u32 = 5;
    /// Unsigned 16-bit integer (in `int_value`).
    pub const UINT16: u32 = 6;
    /// Unsigned 32-bit integer (in `int_value`).
    pub const UINT32: u32 = 7;
    /// Unsigned 64-bit integer (in `long_value`).
    pub const UINT64: u32 = 8;
    /// 32-bit float (in `float_value`).
    pub const FLOAT: u32 = 9;
    /// 64-bit float (in `double_value`).
    pub const DOUBLE: u32 = 10;
    /// Boolean (in `boolean_value`).
    pub const BOOLEAN: u32 = 11;
    /// UTF-8 string (in `string_value`).
    pub const STRING: u32 = 12;
    /// Milliseconds since the epoch (in `long_value`).
    pub const DATETIME: u32 = 13;
    /// UTF-8 text (in `string_value`).
    pub const TEXT: u32 = 14;

    /// The specification's name of datatype `t`.
    pub fn name(t: u32) -> &'static str {
        match t {
            INT8 => "Int8",
            INT16 => "Int16",
            INT32 => "Int32",
            INT64 => "Int64",
            UINT8 => "UInt8",
            UINT16 => "UInt16",
            UINT32 => "UInt32",
            UINT64 => "UInt64",
            FLOAT => "Float",
            DOUBLE => "Double",
            BOOLEAN => "Boolean",
            STRING => "String",
            DATETIME => "DateTime",
            TEXT => "Text",
            _ => "Unknown",
        }
    }
}

/// A Sparkplug B payload: one MQTT message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Payload {
    /// When the message was published, in UTC milliseconds since the epoch.
    #[prost(uint64, optional, tag = "1")]
    pub timestamp: Option<u64>,
    /// The metrics.
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
    /// The node's message sequence number, 0 to 255 (absent in NDEATH).
    #[prost(uint64, optional, tag = "3")]
    pub seq: Option<u64>,
    /// A schema identifier (unused here).
    #[prost(string, optional, tag = "4")]
    pub uuid: Option<String>,
    /// Custom bytes (unused here).
    #[prost(bytes = "vec", optional, tag = "5")]
    pub body: Option<Vec<u8>>,
}

/// One metric: a value with its name or alias, timestamp and datatype.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    /// The name: only in births (and in commands that do not use the alias).
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// The alias a birth ties to the name; data messages carry only it.
    #[prost(uint64, optional, tag = "2")]
    pub alias: Option<u64>,
    /// When the value was acquired, in UTC milliseconds.
    #[prost(uint64, optional, tag = "3")]
    pub timestamp: Option<u64>,
    /// The datatype (a [`datatype`] number): in births only.
    #[prost(uint32, optional, tag = "4")]
    pub datatype: Option<u32>,
    /// A value from the past (store and forward): it must not update the live tag.
    #[prost(bool, optional, tag = "5")]
    pub is_historical: Option<bool>,
    /// A value not to be historized.
    #[prost(bool, optional, tag = "6")]
    pub is_transient: Option<bool>,
    /// The value is null (then no value is set).
    #[prost(bool, optional, tag = "7")]
    pub is_null: Option<bool>,
    /// Properties: engineering unit, quality.
    #[prost(message, optional, tag = "9")]
    pub properties: Option<PropertySet>,
    /// The value.
    #[prost(oneof = "Value", tags = "10, 11, 12, 13, 14, 15, 16")]
    pub value: Option<Value>,
}

/// The value of a metric, in the field its datatype names.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    /// Int8/16/32 and UInt8/16/32.
    #[prost(uint32, tag = "10")]
    IntValue(u32),
    /// Int64, UInt64, DateTime.
    #[prost(uint64, tag = "11")]
    LongValue(u64),
    /// Float.
    #[prost(float, tag = "12")]
    FloatValue(f32),
    /// Double.
    #[prost(double, tag = "13")]
    DoubleValue(f64),
    /// Boolean.
    #[prost(bool, tag = "14")]
    BooleanValue(bool),
    /// String, Text.
    #[prost(string, tag = "15")]
    StringValue(String),
    /// Bytes, File.
    #[prost(bytes = "vec", tag = "16")]
    BytesValue(Vec<u8>),
}

/// Key/value properties of a metric: two lists of the same length.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PropertySet {
    /// The names.
    #[prost(string, repeated, tag = "1")]
    pub keys: Vec<String>,
    /// The values, in the order of the names.
    #[prost(message, repeated, tag = "2")]
    pub values: Vec<PropertyValue>,
}

/// One property's value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PropertyValue {
    /// Its datatype (a [`datatype`] number).
    #[prost(uint32, optional, tag = "1")]
    pub r#type: Option<u32>,
    /// The value is null.
    #[prost(bool, optional, tag = "2")]
    pub is_null: Option<bool>,
    /// The value.
    #[prost(oneof = "PropertyKind", tags = "3, 4, 5, 6, 7, 8")]
    pub value: Option<PropertyKind>,
}

/// The value of a property.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum PropertyKind {
    /// Int8/16/32 and UInt8/16/32.
    #[prost(uint32, tag = "3")]
    IntValue(u32),
    /// Int64, UInt64, DateTime.
    #[prost(uint64, tag = "4")]
    LongValue(u64),
    /// Float.
    #[prost(float, tag = "5")]
    FloatValue(f32),
    /// Double.
    #[prost(double, tag = "6")]
    DoubleValue(f64),
    /// Boolean.
    #[prost(bool, tag = "7")]
    BooleanValue(bool),
    /// String, Text.
    #[prost(string, tag = "8")]
    StringValue(String),
}

/// The `Quality` property's codes (an Int32 property).
pub mod quality {
    /// Bad.
    pub const BAD: u32 = 0;
    /// Good.
    pub const GOOD: u32 = 192;
}

impl PropertySet {
    /// Adds a string property.
    pub fn string(&mut self, key: &str, value: &str) {
        self.keys.push(key.to_string());
        self.values.push(PropertyValue {
            r#type: Some(datatype::STRING),
            is_null: None,
            value: Some(PropertyKind::StringValue(value.to_string())),
        });
    }

    /// Adds the `Quality` property (an Int32, as the specification wants it).
    pub fn quality(&mut self, code: u32) {
        self.keys.push("Quality".to_string());
        self.values.push(PropertyValue {
            r#type: Some(datatype::INT32),
            is_null: None,
            value: Some(PropertyKind::IntValue(code)),
        });
    }
}

impl Payload {
    /// The protobuf bytes.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Reads protobuf bytes; the error is the decoder's.
    pub fn decode_bytes(bytes: &[u8]) -> Result<Self, prost::DecodeError> {
        Self::decode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_round_trips_and_skips_fields_it_does_not_declare() {
        let p = Payload {
            timestamp: Some(1_700_000_000_000),
            metrics: vec![Metric {
                name: Some("g/temp".into()),
                alias: Some(7),
                timestamp: Some(1_700_000_000_000),
                datatype: Some(datatype::DOUBLE),
                value: Some(Value::DoubleValue(21.5)),
                ..Metric::default()
            }],
            seq: Some(3),
            ..Payload::default()
        };
        let mut bytes = p.encode();
        assert_eq!(Payload::decode_bytes(&bytes).unwrap(), p);
        // A metric's metadata (field 8) and a template value (field 18) are skipped.
        // Field 2 (a metric), 5 bytes: an empty field 8, an empty field 18.
        bytes.extend([0x12, 0x05, 0x42, 0x00, 0x92, 0x01, 0x00]);
        let back = Payload::decode_bytes(&bytes).unwrap();
        assert_eq!(back.metrics.len(), 2);
        assert_eq!(back.metrics[1].value, None);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Payload::decode_bytes(&[0xff, 0xff, 0xff]).is_err());
    }
}
