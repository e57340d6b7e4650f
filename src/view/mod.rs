//! Views: what the read layer (`read`) knows of a soak or a job, said to a person — in words on
//! the terminal and as a page. Each only presents: nothing here reads the log's forms, and
//! nothing here is read back.
//!
//! - [`explained`]: the evidence and the findings of a failure, in words;
//! - [`judged`]: what the summary judges of the resources, in words;
//! - [`stepped`]: the trainer's steps in words;
//! - [`timeline`]: a record as a line of `history`'s timeline (and of the report's);
//! - [`report`]: the HTML page of a soak, and of a job.

pub(crate) mod explained;
pub(crate) mod judged;
pub(crate) mod report;
pub(crate) mod stepped;
pub(crate) mod timeline;
