pub mod gpuset;
