# Allocation-heavy pure Perl: builds and frees hashes of small arrays, so that most of its time
# is in perl's own code and glibc's malloc and free.
use strict;
use warnings;
my $rounds = shift // 6;
my $sum = 0;
for my $round (1 .. $rounds) {
    my (%a, %b);
    for my $i (1 .. 125_000) {
        $a{"k$i"} = [$i, $i * 2, "v$i"];
        $b{$i} = [@{$a{"k$i"}}[0, 1]];
    }
    for my $k (keys %b) {
        $sum += $b{$k}[1] - $b{$k}[0];
    }
}
print "$sum\n";
