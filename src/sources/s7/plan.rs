//! The planner: a group's items packed into the fewest ReadVar requests the negotiated PDU
//! allows, with both the request (12 bytes per item) and the answer (4 bytes per item, its
//! data, a fill byte after odd data) within the PDU.
//!
//! Every item costs the same in a request, so the count per request is capped; in the answer
//! items cost their size. First-fit decreasing packs the answer side under that cap; the
//! result is checked against the lower bound ([`minimum_requests`]) in the tests. Items are
//! not merged into spans: one item per point keeps each point's return code its own (a
//! refused DB never takes the neighbours of a merged span with it).
//!
//! An item larger than one answer (a STRING[254] at PDU 240) is read alone, in parts of
//! [`part_len`] bytes, one request each, one after the other: a value the PLC changes
//! between two parts can mix old and new bytes, as with any client at that PDU.

use super::address::Address;
use super::frame::{
    Span, REQUEST_ITEM_LEN, REQUEST_OVERHEAD, RESPONSE_ITEM_HEAD, RESPONSE_OVERHEAD,
};
use super::types::DataType;

/// One point to read or write: where, and as what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Item {
    /// The address.
    pub address: Address,
    /// The type, checked to fit the address's width.
    pub data_type: DataType,
}

impl Item {
    /// An item, if the type fits the address's width.
    pub fn new(address: Address, data_type: DataType) -> Result<Item, String> {
        data_type.check_width(&address)?;
        Ok(Item { address, data_type })
    }

    /// An item from its texts: `DB10.DBD4`, `real` (`length` for a string).
    pub fn parse(address: &str, data_type: &str, length: Option<u32>) -> Result<Item, String> {
        Item::new(
            Address::parse(address)?,
            DataType::parse(data_type, length)?,
        )
    }

    /// The bytes read for it (a bool: its byte).
    pub fn span(&self) -> Span {
        Span {
            area: self.address.area,
            start: self.address.byte,
            len: self.data_type.size() as u16,
        }
    }

    /// Its cost in an answer: head, data, fill.
    fn answer_cost(&self) -> usize {
        let len = self.data_type.size();
        RESPONSE_ITEM_HEAD + len + len % 2
    }
}

/// How a group is read with a PDU size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The PDU size planned for.
    pub pdu: u16,
    /// Each request: the indexes of its items, ascending.
    pub requests: Vec<Vec<usize>>,
    /// Items larger than one answer of this PDU, each read alone in parts.
    pub in_parts: Vec<usize>,
}

/// Most items of one request with `pdu`.
pub fn max_items(pdu: u16) -> usize {
    (usize::from(pdu).saturating_sub(REQUEST_OVERHEAD) / REQUEST_ITEM_LEN).clamp(1, 255)
}

/// Most answer bytes of items with `pdu`.
fn answer_budget(pdu: u16) -> usize {
    usize::from(pdu).saturating_sub(RESPONSE_OVERHEAD)
}

/// The bytes of one part of an item read in parts (even, so no fill byte).
pub fn part_len(pdu: u16) -> usize {
    (answer_budget(pdu).saturating_sub(RESPONSE_ITEM_HEAD) & !1).max(2)
}

/// Packs `items` for `pdu`.
pub fn plan(items: &[Item], pdu: u16) -> Plan {
    let (cap, budget) = (max_items(pdu), answer_budget(pdu));
    let mut order: Vec<usize> = Vec::with_capacity(items.len());
    let mut in_parts = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if item.answer_cost() > budget {
            in_parts.push(i);
        } else {
            order.push(i);
        }
    }
    // Largest first; ties in address order, so a plan is the same from run to run.
    order.sort_by_key(|&i| std::cmp::Reverse(items[i].answer_cost()));
    let mut bins: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in order {
        let cost = items[i].answer_cost();
        match bins
            .iter_mut()
            .find(|(used, members)| members.len() < cap && used + cost <= budget)
        {
            Some((used, members)) => {
                *used += cost;
                members.push(i);
            }
            None => bins.push((cost, vec![i])),
        }
    }
    let requests = bins
        .into_iter()
        .map(|(_, mut members)| {
            members.sort_unstable();
            members
        })
        .collect();
    Plan {
        pdu,
        requests,
        in_parts,
    }
}

/// The fewest requests any packing of `items` can take with `pdu`: by the item cap and by
/// the answer bytes, plus the parts of the items read in parts.
pub fn minimum_requests(items: &[Item], pdu: u16) -> usize {
    let budget = answer_budget(pdu).max(1);
    let (large, small): (Vec<&Item>, Vec<&Item>) =
        items.iter().partition(|i| i.answer_cost() > budget);
    let bytes: usize = small.iter().map(|i| i.answer_cost()).sum();
    let parts: usize = large
        .iter()
        .map(|i| i.data_type.size().div_ceil(part_len(pdu)))
        .sum();
    small
        .len()
        .div_ceil(max_items(pdu))
        .max(bytes.div_ceil(budget))
        + parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(address: &str, t: &str, length: Option<u32>) -> Item {
        Item::parse(address, t, length).unwrap_or_else(|e| panic!("{e}"))
    }

    fn check_fits(items: &[Item], p: &Plan) {
        let mut seen = vec![false; items.len()];
        for r in &p.requests {
            assert!(REQUEST_OVERHEAD + r.len() * REQUEST_ITEM_LEN <= usize::from(p.pdu));
            let answer: usize = r.iter().map(|&i| items[i].answer_cost()).sum();
            assert!(RESPONSE_OVERHEAD + answer <= usize::from(p.pdu), "{answer}");
            for &i in r {
                assert!(!seen[i], "item {i} twice");
                seen[i] = true;
            }
        }
        for i in &p.in_parts {
            seen[*i] = true;
        }
        assert!(seen.iter().all(|s| *s), "every item planned once");
    }

    #[test]
    fn three_hundred_reals_take_the_request_side_minimum() {
        let items: Vec<Item> = (0..300)
            .map(|i| item(&format!("DB1.DBD{}", i * 4), "real", None))
            .collect();
        for pdu in [240, 480, 960] {
            let p = plan(&items, pdu);
            check_fits(&items, &p);
            assert_eq!(p.requests.len(), minimum_requests(&items, pdu), "pdu {pdu}");
        }
        // 480: 39 items per request (12 + 39 × 12 = 480), so 8 requests.
        assert_eq!(plan(&items, 480).requests.len(), 8);
    }

    #[test]
    fn long_strings_take_the_answer_side_minimum() {
        let mut items: Vec<Item> = (0..40)
            .map(|i| item(&format!("DB2.DBB{}", i * 102), "string", Some(100)))
            .collect();
        items.extend((0..40).map(|i| item(&format!("DB3.DBX{}.{}", i / 8, i % 8), "bool", None)));
        let p = plan(&items, 480);
        check_fits(&items, &p);
        assert_eq!(p.requests.len(), minimum_requests(&items, 480));
    }

    #[test]
    fn an_item_larger_than_an_answer_is_read_in_parts_and_the_others_are_packed() {
        let items = [
            item("DB1.DBB0", "string", Some(254)),
            item("DB1.DBW300", "int", None),
        ];
        let p = plan(&items, 240);
        assert_eq!(p.requests, vec![vec![1]]);
        assert_eq!(p.in_parts, vec![0]);
        // 240 - 14 - 4 = 222 bytes a part: 256 bytes in 2 parts, and 1 request for the int.
        assert_eq!(part_len(240), 222);
        assert_eq!(minimum_requests(&items, 240), 3);
    }

    proptest! {
        #[test]
        fn every_plan_fits_the_pdu_both_ways_and_holds_every_item_once(
            kinds in proptest::collection::vec(0usize..6, 0..400),
            pdu in 240u16..=960,
        ) {
            let items: Vec<Item> = kinds.iter().enumerate().map(|(i, k)| match k {
                0 => item(&format!("DB1.DBX{i}.1"), "bool", None),
                1 => item(&format!("DB1.DBB{i}"), "byte", None),
                2 => item(&format!("DB1.DBW{i}"), "int", None),
                3 => item(&format!("DB1.DBD{i}"), "real", None),
                4 => item(&format!("DB1.DBB{i}"), "lreal", None),
                _ => item(&format!("DB1.DBB{i}"), "string", Some((i % 60) as u32 + 1)),
            }).collect();
            let p = plan(&items, pdu);
            check_fits(&items, &p);
            prop_assert!(p.requests.len() >= minimum_requests(&items, pdu));
        }
    }
}
