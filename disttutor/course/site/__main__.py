import sys

from disttutor.course.site.build import main

sys.exit(main())
