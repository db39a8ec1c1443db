#!/usr/bin/perl
# count.pl fills a hash of 100,000 keys, sorts, matches and formats: answers
# the test knows (it computes them itself).
use strict;
use warnings;

my %h;
$h{"k$_"} = $_ for 0 .. 99_999;
my $sum = 0;
$sum += $_ for values %h;
printf "keys %d, sum %d\n", scalar(keys %h), $sum;

my @sevens = grep { /7$/ } sort { $h{$a} <=> $h{$b} } keys %h;
printf "ending in 7: %d, first %s, last %s\n", scalar(@sevens), $sevens[0], $sevens[-1];

my @primes;
N: for my $n (2 .. 19_999) {
	for my $p (@primes) {
		last if $p * $p > $n;
		next N if $n % $p == 0;
	}
	push @primes, $n;
}
printf "primes below 20000: %d, largest %d\n", scalar(@primes), $primes[-1];
print STDERR join(",", map { sprintf "%.3f", sqrt } 2, 3, 5), "\n";
